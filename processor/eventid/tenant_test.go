package eventid

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dedupio/dedup/connect/secretfile"
	"github.com/dedupio/dedup/processor/tenantsig"
)

// testKeys is the tests' tenant keyring; otherKeys one that is not the
// routers' (a forger's guess, a leaked key of another deployment).
var (
	testKeys  = mustKeys("keys: [{id: k1, secret: dGVzdC10ZW5hbnQta2V5LTAxMjM0NTY3ODlhYmNkZWY=}]")
	otherKeys = mustKeys("keys: [{id: k1, secret: b3RoZXItdGVuYW50LWtleS0wMTIzNDU2Nzg5YWJjZGVm}]")
)

func mustKeys(file string) *tenantsig.Keyring {
	k, err := tenantsig.Parse("kafka.tenant_keys_file", []byte(file))
	if err != nil {
		panic(err)
	}
	return k
}

// signed is r as dedup ingress writes it: signed with keys, whatever its
// tenant header says (signing is checked by SignTenant, not here).
func signed(keys *tenantsig.Keyring, r Record) Record {
	sig, err := keys.Sign(TenantMessage(r))
	if err != nil {
		panic(err)
	}
	r.Headers = append(r.Headers, Header{Key: tenantsig.Header, Value: []byte(sig)})
	return r
}

// Two tenants' order-123 are two events: the dedup-tenant header, signed
// by the ingress, scopes the ID the chain gives, whatever the rule; a
// record without it keeps the ID as it is (the seed's format for events
// that reach Kafka directly).
func TestTenantScopesTheID(t *testing.T) {
	d := mustDecoder(t, nil).WithTenantKeys(testKeys)
	ce := []string{"ce_specversion", "1.0", "ce_type", "order.created", "ce_id", "order-123"}
	cases := []struct {
		name    string
		r       Record
		id      string
		rule    Rule
		invalid bool
	}{
		{"direct", rec(`{}`, ce...), "order-123", RuleHeader, false},
		{"acme", signed(testKeys, rec(`{}`, append(ce, TenantHeader, "acme")...)), "@acme/order-123", RuleHeader, false},
		{"globex", signed(testKeys, rec(`{}`, append(ce, TenantHeader, "globex")...)), "@globex/order-123", RuleHeader, false},
		{"plain field", signed(testKeys, rec(`{"id":"order-123","type":"t"}`, TenantHeader, "acme")), "@acme/order-123", RuleField, false},
		{"upper case", signed(testKeys, rec(`{}`, append(ce, TenantHeader, "Acme")...)), "", "", true},
		{"slash", signed(testKeys, rec(`{}`, append(ce, TenantHeader, "a/b")...)), "", "", true},
		{"empty", signed(testKeys, rec(`{}`, append(ce, TenantHeader, "")...)), "", "", true},
		{"long", signed(testKeys, rec(`{}`, append(ce, TenantHeader, strings.Repeat("a", MaxTenantLength+1))...)), "", "", true},
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
	dc := mustDecoder(t, func(c *Config) { c.Chain = []Rule{RuleContent} }).WithTenantKeys(testKeys)
	a, errA := dc.Decode(signed(testKeys, rec(`{"type":"t","x":1}`, TenantHeader, "acme")))
	b, errB := dc.Decode(signed(testKeys, rec(`{"type":"t","x":1}`, TenantHeader, "globex")))
	if errA != nil || errB != nil || a.ID == b.ID || !strings.HasPrefix(a.ID, "@acme/") || a.Tenant != "acme" {
		t.Errorf("content rule: %q %q %v %v", a.ID, b.ID, errA, errB)
	}
}

// Only dedup ingress speaks for a tenant: a record with the dedup-tenant
// header is taken only with the signature of a key of the router's
// keyring over the record as written. Unsigned, signed with another key,
// with a key ID the keyring does not hold, a malformed signature, a
// signed record changed afterwards (its data, its ID, an attribute, its
// key), or any tenant header at a router without a keyring: forged_tenant,
// and no event. The signature's own check: SignTenant refuses without a
// keyring.
func TestTenantHeaderNeedsTheIngressSignature(t *testing.T) {
	d := mustDecoder(t, nil).WithTenantKeys(testKeys)
	ce := []string{"ce_specversion", "1.0", "ce_type", "order.created", "ce_id", "k-9", TenantHeader, "acme"}
	good := signed(testKeys, rec(`{"total":9}`, ce...))
	if ev, err := d.Decode(good); err != nil || ev.ID != "@acme/k-9" || ev.Tenant != "acme" {
		t.Fatalf("the ingress's record: %+v %v", ev, err)
	}
	changed := func(f func(r *Record)) Record {
		r := good
		r.Key, r.Value = slices.Clone(r.Key), slices.Clone(r.Value)
		r.Headers = slices.Clone(r.Headers)
		f(&r)
		return r
	}
	withSig := func(v string) Record {
		return changed(func(r *Record) { r.Headers[len(r.Headers)-1].Value = []byte(v) })
	}
	for name, r := range map[string]Record{
		"unsigned":             rec(`{"total":666}`, ce...),
		"another key":          signed(otherKeys, rec(`{"total":666}`, ce...)),
		"unknown key ID":       withSig(strings.Replace(string(good.Headers[len(good.Headers)-1].Value), "kid=k1", "kid=k2", 1)),
		"malformed":            withSig("v1;kid=k1;AAAA"),
		"no version":           withSig("kid=k1;AAAA"),
		"other data":           changed(func(r *Record) { r.Value = []byte(`{"total":666}`) }),
		"other ID":             changed(func(r *Record) { r.Headers[2].Value = []byte("k-10") }),
		"other key":            changed(func(r *Record) { r.Key = []byte("k2") }),
		"an attribute added":   changed(func(r *Record) { r.Headers = append(r.Headers, Header{Key: "ce_subject", Value: []byte("x")}) }),
		"the tenant changed":   changed(func(r *Record) { r.Headers[3].Value = []byte("globex") }),
		"a second tenant line": changed(func(r *Record) { r.Headers = append(r.Headers, Header{Key: TenantHeader, Value: []byte("globex")}) }),
	} {
		ev, err := d.Decode(r)
		if ReasonOf(err) != ReasonForgedTenant || ev.ID != "" {
			t.Errorf("%s: %q %v, want forged_tenant and no event", name, ev.ID, err)
		}
	}
	// A router without a keyring takes no record as a tenant's, signed or
	// not; a record without the header is decoded as before.
	plain := mustDecoder(t, nil)
	if ev, err := plain.Decode(good); ReasonOf(err) != ReasonForgedTenant || ev.ID != "" {
		t.Errorf("no keyring, a signed record: %q %v, want forged_tenant", ev.ID, err)
	}
	if ev, err := plain.Decode(rec(`{}`, ce[:6]...)); err != nil || ev.ID != "k-9" {
		t.Errorf("no keyring, no tenant: %q %v", ev.ID, err)
	}
	if _, err := plain.SignTenant(rec(`{}`, ce...)); err == nil {
		t.Error("SignTenant without a keyring signed")
	}
	// A replayed dead letter keeps the signature: the origin headers dedup
	// dlq replay adds are outside it.
	replayed := changed(func(r *Record) {
		r.Headers = append(r.Headers, Header{Key: "dedup-origin-topic", Value: []byte("events")}, Header{Key: "dedup-origin-offset", Value: []byte("7")})
	})
	if ev, err := d.Decode(replayed); err != nil || ev.ID != "@acme/k-9" {
		t.Errorf("replayed: %q %v", ev.ID, err)
	}
}

// A keyring file broken for a moment (an edit in progress, a typo during a
// rotation, a Secret briefly unreadable) is this deployment's fault, not the
// record's: a record the ingress signed and that verifies once the file is
// whole again must not be judged forged_tenant meanwhile. eventid.Error says
// "retrying the same bytes gives the same error", and the router
// dead-letters it at once; tenantsig.Verify itself tells the two apart (its
// error wraps ErrInvalid only for a bad signature), but tenantOf labels both
// forged_tenant, so every tenant record read while the file is broken is
// dead-lettered (the ingress, for the same broken file, answers 503 and
// keeps the caller's record).
func TestASignedRecordReadWhileTheKeyringIsBrokenIsNotForged(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.yaml")
	whole := []byte("keys: [{id: k1, secret: dGVzdC10ZW5hbnQta2V5LTAxMjM0NTY3ODlhYmNkZWY=}]\n")
	if err := os.WriteFile(path, whole, 0o600); err != nil {
		t.Fatal(err)
	}
	time.Sleep(secretfile.StatInterval) // the next look at the file (secretfile.StatInterval)
	keys, err := tenantsig.Load("kafka.tenant_keys_file", path)
	if err != nil {
		t.Fatal(err)
	}
	d := mustDecoder(t, nil).WithTenantKeys(keys)
	good := signed(keys, rec(`{"total":9}`, "ce_specversion", "1.0", "ce_type", "order.created", "ce_id", "k-9", TenantHeader, "acme"))
	// A broken edit (another size: read again at the next look).
	if err := os.WriteFile(path, []byte("keys: [{id: k1, secret: \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	time.Sleep(secretfile.StatInterval) // the next look at the file (secretfile.StatInterval)
	if keys.Check() == nil {
		t.Fatal("the broken file was not read again: the test cannot see the window")
	}
	// The keyring keeps the last keys it read successfully: the record
	// verifies with them, and an invalid signature is still the only
	// forged_tenant.
	ev, err := d.Decode(good)
	if r := ReasonOf(err); r != "" {
		t.Errorf("the ingress's own record, read while the keyring file is broken: permanent %q (%v), want it verified by the last good keys", r, err)
	} else if err != nil || ev.ID != "@acme/k-9" {
		t.Errorf("the ingress's own record, read while the keyring file is broken: %q %v, want @acme/k-9 (the last good keys)", ev.ID, err)
	}
	forged := good
	forged.Value = []byte(`{"total":10}`)
	if _, err := d.Decode(forged); ReasonOf(err) != ReasonForgedTenant {
		t.Errorf("a record changed after signing, read while the file is broken: %v, want forged_tenant", err)
	}
	if err := os.WriteFile(path, whole, 0o600); err != nil {
		t.Fatal(err)
	}
	time.Sleep(secretfile.StatInterval) // the next look at the file (secretfile.StatInterval)
	if ev, err := d.Decode(good); err != nil || ev.ID != "@acme/k-9" {
		t.Fatalf("the same bytes, the file whole again: %q %v", ev.ID, err)
	}
}
