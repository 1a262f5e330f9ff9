package eventid

import "testing"

// Guards against: the unscoped ID space overlaps every tenant's.
//
// A tenant's event ID is "{tenant}/{key}" (ScopedID); a record without
// the dedup-tenant header (a producer writing to Kafka directly, the Go
// client, a replayed dead letter: see processor/replay's
// TestReplayKeepsTheTenant) keeps its chain ID as it is, and nothing
// stops that ID from containing "/". So the unscoped event "acme/order-1"
// and acme's event "order-1" are one event ID, one workflow ID
// (activity-confirm:acme/order-1), one ledger row: whichever is claimed
// second is a duplicate (skipped) or a conflict (dead-lettered), and
// tenant acme reads the other producer's workflow through GET
// /v1/workflows (owns() checks the "acme/" prefix only; see
// internal/ingress TestTenantCannotReadAnUnscopedWorkflow).
//
// Why it matters: the package doc promises two tenants' keys never meet,
// but "tenant" space and the unscoped space are not disjoint; keys of the
// form "customer/order" are common for direct producers.
func TestUnscopedIDNeverEqualsAScopedOne(t *testing.T) {
	d := mustDecoder(t, nil).WithTenantKeys(testKeys)
	ce := []string{"ce_specversion", "1.0", "ce_type", "order.created"}
	tenants, err := d.Decode(signed(testKeys, rec(`{}`, append(ce, "ce_id", "order-1", TenantHeader, "acme")...)))
	if err != nil {
		t.Fatal(err)
	}
	direct, err := d.Decode(rec(`{}`, append(ce, "ce_id", "acme/order-1")...))
	if err != nil {
		// Refusing a '/' in unscoped IDs (or scoping them apart) would
		// also close the hole.
		t.Skipf("unscoped ID with a slash refused: %v", err)
	}
	if tenants.ID == direct.ID {
		t.Errorf("tenant acme's key order-1 and a direct producer's key acme/order-1 are one event ID %q: "+
			"the unscoped space overlaps the tenant's", tenants.ID)
	}
}
