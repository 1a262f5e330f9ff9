package eventid

import (
	"fmt"
	"strings"
)

// TenantHeader is the record header that scopes an event's ID to a tenant:
// a record carrying it with the value T has the ID "@T/" followed by the
// ID the chain gives (whatever the rule), so two tenants' "order-123" are
// two events (@acme/order-123, @globex/order-123) and two workflows
// (activity-{activity_id}:@acme/order-123). dedup ingress sets it from the
// caller's bearer token and never copies it from a request. A record
// without it (a producer writing to Kafka directly) keeps the chain's ID
// as it is, activity-{activity_id}:{event_id}, except that such an ID may
// not start with '@' (invalid_id): the tenants' IDs and the others never
// meet.
const TenantHeader = "dedup-tenant"

// MaxTenantLength bounds a tenant name, in bytes: a scoped ID is at most
// this plus one longer than event_id.max_id_length allows the key.
const MaxTenantLength = 63

// ValidTenant says why name is not a tenant name: 1 to MaxTenantLength
// bytes of a-z, 0-9, '.', '_' and '-', starting with a letter or digit (no
// '/': the first '/' of a scoped ID ends the tenant).
func ValidTenant(name string) error {
	if name == "" || len(name) > MaxTenantLength {
		return fmt.Errorf("tenant %q: want 1 to %d bytes", name, MaxTenantLength)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
		case i > 0 && (c == '.' || c == '_' || c == '-'):
		default:
			return fmt.Errorf("tenant %q: byte %d is %q; want a-z, 0-9 (and '.', '_', '-' after the first)", name, i, c)
		}
	}
	return nil
}

// TenantPrefix starts every tenant's event ID, and no other.
const TenantPrefix = "@"

// ScopedID is the ID of an event of tenant with the chain's ID id ("" tenant:
// id as it is).
func ScopedID(tenant, id string) string {
	if tenant == "" {
		return id
	}
	return TenantPrefix + tenant + "/" + id
}

// TenantOf is the tenant of an event ID ("" for an unscoped one).
func TenantOf(id string) string {
	rest, ok := strings.CutPrefix(id, TenantPrefix)
	if !ok {
		return ""
	}
	tenant, _, ok := strings.Cut(rest, "/")
	if !ok {
		return ""
	}
	return tenant
}

// unscoped refuses an ID without a tenant that looks like a tenant's.
func unscoped(id, where string) error {
	if strings.HasPrefix(id, TenantPrefix) {
		return fail(ReasonInvalidID, "%s %q starts with %q, which only tenants' IDs do (%s header): a producer writing to Kafka directly may not use it", where, id, TenantPrefix, TenantHeader)
	}
	return nil
}

// tenantOf reads the tenant header: "" when absent, an invalid_id error
// when present but not a tenant name.
func tenantOf(r Record) (string, error) {
	v, ok := header(r.Headers, TenantHeader)
	if !ok {
		return "", nil
	}
	if err := ValidTenant(string(v)); err != nil {
		return "", fail(ReasonInvalidID, "header %s: %v", TenantHeader, err)
	}
	return string(v), nil
}
