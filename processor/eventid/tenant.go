package eventid

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/dedupio/dedup/processor/tenantsig"
)

// TenantHeader is the record header that scopes an event's ID to a tenant:
// a record carrying it with the value T has the ID "@T/" followed by the
// ID the chain gives (whatever the rule), so two tenants' "order-123" are
// two events (@acme/order-123, @globex/order-123) and two workflows
// (activity-{activity_id}:@acme/order-123). dedup ingress sets it from the
// caller's bearer token and never copies it from a request, and signs the
// record (tenantsig.Header): a router takes the header only with a
// signature that a key of its keyring (kafka.tenant_keys_file) verifies,
// and dead-letters any other record that carries it (ReasonForgedTenant),
// so a producer writing to Kafka directly cannot speak for a tenant. A
// record without it (a producer writing to Kafka directly) keeps the chain's ID
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

// tenantOf reads the tenant header: "" when absent; a forged_tenant error
// when present without a signature the decoder's keyring verifies (or
// without a keyring: then no record is a tenant's); an invalid_id error
// when signed but not a tenant name.
func (d *Decoder) tenantOf(r Record) (string, error) {
	v, ok := header(r.Headers, TenantHeader)
	if !ok {
		return "", nil
	}
	sig, signed := header(r.Headers, tenantsig.Header)
	switch {
	case d.keys == nil:
		return "", fail(ReasonForgedTenant, "header %s: this router has no tenant keyring (kafka.tenant_keys_file), so no record speaks for a tenant: only dedup ingress may set it", TenantHeader)
	case !signed:
		return "", fail(ReasonForgedTenant, "header %s without %s: only dedup ingress may set it", TenantHeader, tenantsig.Header)
	}
	if err := d.keys.Verify(string(sig), TenantMessage(r)); err != nil {
		// (A keyring file broken after a good read keeps its last good
		// keys, so only an invalid signature is forged: tenantsig.Keyring.)
		return "", fail(ReasonForgedTenant, "header %s: %v", TenantHeader, err)
	}
	if err := ValidTenant(string(v)); err != nil {
		return "", fail(ReasonInvalidID, "header %s: %v", TenantHeader, err)
	}
	return string(v), nil
}

// TenantMessage is what a tenant's signature covers: the record as
// written, its key, its value and every header in order (the tenant's
// included), but the signature itself and the dedup-origin-* headers
// that dedup dlq replay adds, each length-prefixed. A copy whose
// attributes were changed (its ID, data, time, subject, an extension, its
// key) does not verify.
func TenantMessage(r Record) []byte {
	n := 32 + len(r.Key) + len(r.Value)
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value) + 4
	}
	b := make([]byte, 0, n)
	b = append(b, "dedup-tenant-sig v1\n"...)
	b = appendField(b, r.Key)
	b = appendField(b, r.Value)
	for _, h := range r.Headers {
		if h.Key == tenantsig.Header || strings.HasPrefix(h.Key, "dedup-origin-") {
			continue
		}
		b = appendField(b, []byte(h.Key))
		b = appendField(b, h.Value)
	}
	return b
}

func appendField(b, v []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}

// SignTenant is the tenantsig.Header value of r, which carries the tenant
// header, under the decoder's keyring (WithTenantKeys). Only dedup
// ingress holds the keyring, and signs only the records of its callers'
// tenants.
func (d *Decoder) SignTenant(r Record) (string, error) {
	if d.keys == nil {
		return "", errors.New("signing a tenant's record: no tenant keyring (kafka.tenant_keys_file)")
	}
	v, ok := header(r.Headers, TenantHeader)
	if !ok {
		return "", fmt.Errorf("signing a tenant's record: no %s header", TenantHeader)
	}
	if err := ValidTenant(string(v)); err != nil {
		return "", fmt.Errorf("signing a tenant's record: %w", err)
	}
	return d.keys.Sign(TenantMessage(r))
}
