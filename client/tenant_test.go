package client_test

import (
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedupio/dedup/client"
	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/processor/eventid"
	"github.com/dedupio/dedup/processor/tenantsig"
)

// The public client cannot speak for a tenant: Prepare refuses a record
// that carries the dedup-tenant header, with or without a signature
// copied from another record (forged_tenant, as a router would
// dead-letter it), unless the client holds the tenant keyring, which only
// dedup ingress is given; with it, the record is signed (over the key
// Prepare sets) and decided as the tenant's.
func TestPrepareRefusesATenantWithoutTheKeyring(t *testing.T) {
	keys, err := tenantsig.Parse("kafka.tenant_keys_file", []byte("keys: [{id: k1, secret: dGVzdC10ZW5hbnQta2V5LTAxMjM0NTY3ODlhYmNkZWY=}]"))
	if err != nil {
		t.Fatal(err)
	}
	newClient := func(keys *tenantsig.Keyring) *client.Client {
		c, err := client.New(client.Config{Topic: topic, EventID: eventid.DefaultConfig(), Routes: routes, TenantKeys: keys,
			KafkaOpts: []kgo.Opt{kgo.SeedBrokers("127.0.0.1:1")}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
	record := func(extra ...kgo.RecordHeader) *kgo.Record {
		return &kgo.Record{Value: []byte(`{"total":1}`), Headers: append([]kgo.RecordHeader{
			{Key: "ce_specversion", Value: []byte("1.0")}, {Key: "ce_id", Value: []byte("k-9")}, {Key: "ce_type", Value: []byte("order.created")},
			{Key: eventid.TenantHeader, Value: []byte("acme")}}, extra...)}
	}
	ingress := newClient(keys)
	p, err := ingress.Prepare(record())
	if err != nil || p.Event.ID != "@acme/k-9" || p.Event.Tenant != "acme" {
		t.Fatalf("with the keyring: %+v %v", p, err)
	}
	var sig kgo.RecordHeader
	probe := record()
	if _, err := ingress.Prepare(probe); err != nil {
		t.Fatal(err)
	}
	for _, h := range probe.Headers {
		if h.Key == tenantsig.Header {
			sig = h
		}
	}
	if sig.Value == nil {
		t.Fatalf("the ingress's record has no %s header: %v", tenantsig.Header, probe.Headers)
	}
	public := newClient(nil)
	for name, r := range map[string]*kgo.Record{
		"unsigned":                     record(),
		"a signature of another key":   record(kgo.RecordHeader{Key: tenantsig.Header, Value: []byte("v1;kid=k1;" + "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA")}),
		"the ingress's own signature":  probe,
		"a signature on another event": func() *kgo.Record { r := record(sig); r.Value = []byte(`{"total":666}`); return r }(),
	} {
		_, err := public.Prepare(r)
		var invalid *client.InvalidEventError
		if !errors.As(err, &invalid) || invalid.Reason != string(decide.ReasonForgedTenant) {
			t.Errorf("public client, %s: %v, want *InvalidEventError forged_tenant", name, err)
		}
	}
	// The ingress's client re-signs what it prepares: a record that came
	// with a copied signature is signed anew, over its own bytes.
	if p, err := ingress.Prepare(func() *kgo.Record { r := record(sig); r.Value = []byte(`{"total":2}`); return r }()); err != nil || p.Event.ID != "@acme/k-9" {
		t.Errorf("the ingress, a record with a stale signature: %v", err)
	}
}
