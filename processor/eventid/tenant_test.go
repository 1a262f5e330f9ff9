package eventid

import (
	"strings"
	"testing"
)

// Two tenants' order-123 are two events: the dedup-tenant header scopes
// the ID the chain gives, whatever the rule; a record without it keeps
// the ID as it is (the seed's format for events that reach Kafka directly).
func TestTenantScopesTheID(t *testing.T) {
	d := mustDecoder(t, nil)
	ce := []string{"ce_specversion", "1.0", "ce_type", "order.created", "ce_id", "order-123"}
	cases := []struct {
		name    string
		r       Record
		id      string
		rule    Rule
		invalid bool
	}{
		{"direct", rec(`{}`, ce...), "order-123", RuleHeader, false},
		{"acme", rec(`{}`, append(ce, TenantHeader, "acme")...), "@acme/order-123", RuleHeader, false},
		{"globex", rec(`{}`, append(ce, TenantHeader, "globex")...), "@globex/order-123", RuleHeader, false},
		{"plain field", rec(`{"id":"order-123","type":"t"}`, TenantHeader, "acme"), "@acme/order-123", RuleField, false},
		{"upper case", rec(`{}`, append(ce, TenantHeader, "Acme")...), "", "", true},
		{"slash", rec(`{}`, append(ce, TenantHeader, "a/b")...), "", "", true},
		{"empty", rec(`{}`, append(ce, TenantHeader, "")...), "", "", true},
		{"long", rec(`{}`, append(ce, TenantHeader, strings.Repeat("a", MaxTenantLength+1))...), "", "", true},
		// A direct producer's ID never looks like a tenant's.
		{"direct, tenant-like", rec(`{}`, "ce_specversion", "1.0", "ce_type", "order.created", "ce_id", "@acme/order-123"), "", "", true},
	}
	for _, c := range cases {
		ev, err := d.Decode(c.r)
		if c.invalid {
			if ReasonOf(err) != ReasonInvalidID || !strings.Contains(err.Error(), TenantHeader) || ev.ID != "" {
				t.Errorf("%s: err %v, want invalid_id naming %s", c.name, err, TenantHeader)
			}
			continue
		}
		if err != nil || ev.ID != c.id || ev.Rule != c.rule {
			t.Errorf("%s: %q %s %v, want %q %s", c.name, ev.ID, ev.Rule, err, c.id, c.rule)
		}
	}
	// The content rule too: two tenants sending the same content are two
	// events.
	dc := mustDecoder(t, func(c *Config) { c.Chain = []Rule{RuleContent} })
	a, errA := dc.Decode(rec(`{"type":"t","x":1}`, TenantHeader, "acme"))
	b, errB := dc.Decode(rec(`{"type":"t","x":1}`, TenantHeader, "globex"))
	if errA != nil || errB != nil || a.ID == b.ID || !strings.HasPrefix(a.ID, "@acme/") || a.Tenant != "acme" {
		t.Errorf("content rule: %q %q %v %v", a.ID, b.ID, errA, errB)
	}
}
