package replay

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedupio/dedup/processor/eventid"
	"github.com/dedupio/dedup/processor/tenantsig"
	"github.com/dedupio/dedup/schemas"
)

// Guards against: `dedup dlq replay` strips the tenant.
//
// The ingress scopes a tenant's event by the record header dedup-tenant
// (eventid.TenantHeader): acme's "order-123" is the event acme/order-123
// and the workflow activity-confirm:acme/order-123. The router's dead
// letter copies every original header, dedup-tenant included
// (processor/deadletter.go kafkaRecord). But replay's original() drops
// every header that starts with "dedup-" other than the three it maps to
// dedup-origin-*, and dedup-tenant starts with "dedup-". The replayed
// record therefore has no tenant: its ID becomes the unscoped
// "order-123", its workflow activity-confirm:order-123.
//
// Why it matters: a replay (the runbook's answer to temporal_permanent and
// friends) moves a tenant's event out of its tenant's space. The workflow
// the tenant was told about (the 202's status_url) never starts; another
// one does, which the tenant may not read (404: not its prefix); and two
// tenants' replayed "order-123" are one event in the unscoped space: the
// second is a duplicate or a conflict of the first, i.e. lost, and it
// collides with a direct Kafka producer's "order-123" too. "Two tenants'
// keys never meet" stops holding at the first replay.
func TestReplayKeepsTheTenant(t *testing.T) {
	c := newCluster(t, 1)
	// The router's dead letter of acme's binary-mode event: the original
	// headers (ce_*, dedup-tenant) and the dead-letter headers.
	keys, err := tenantsig.Parse("kafka.tenant_keys_file", []byte("keys: [{id: k1, secret: dGVzdC10ZW5hbnQta2V5LTAxMjM0NTY3ODlhYmNkZWY=}]"))
	if err != nil {
		t.Fatal(err)
	}
	dec, err := eventid.NewDecoder(eventid.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	dec = dec.WithTenantKeys(keys)
	orig := eventid.Record{Topic: topic, Offset: 7, Key: []byte("@acme/order-123"), Value: []byte(`{"total":1}`), Headers: []eventid.Header{
		{Key: "ce_specversion", Value: []byte("1.0")}, {Key: "ce_id", Value: []byte("order-123")},
		{Key: "ce_type", Value: []byte("order.created")}, {Key: "content-type", Value: []byte("application/json")},
		{Key: eventid.TenantHeader, Value: []byte("acme")}}}
	sig, err := dec.SignTenant(orig)
	if err != nil {
		t.Fatal(err)
	}
	orig.Headers = append(orig.Headers, eventid.Header{Key: tenantsig.Header, Value: []byte(sig)})
	dl := &kgo.Record{Topic: dlq, Partition: 0, Key: orig.Key, Value: orig.Value}
	dl.Headers = append(dl.Headers, orig.Headers...)
	dl.Headers = append(dl.Headers,
		kgo.RecordHeader{Key: schemas.HeaderDLQReason, Value: []byte("temporal_permanent")}, kgo.RecordHeader{Key: schemas.HeaderDLQTopic, Value: []byte(topic)},
		kgo.RecordHeader{Key: schemas.HeaderDLQPartition, Value: []byte("0")}, kgo.RecordHeader{Key: schemas.HeaderDLQOffset, Value: []byte("7")})
	c.txn("adv", commit, dl)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := Run(ctx, Options{Brokers: c.addrs, IsolationLevel: ReadCommitted, DeadLetterTopics: []string{dlq}, Execute: true}, slog.New(slog.DiscardHandler))
	if err != nil || res.Replayed["temporal_permanent"] != 1 {
		t.Fatalf("replay: %v %+v", err, res)
	}
	got := c.produced(1)
	if len(got) != 1 {
		t.Fatalf("%d records replayed, want 1", len(got))
	}
	toRec := func(r *kgo.Record) eventid.Record {
		er := eventid.Record{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value}
		er.Headers = append(er.Headers, r.Headers...)
		return er
	}
	first, err := dec.Decode(orig)
	if err != nil {
		t.Fatal(err)
	}
	again, err := dec.Decode(toRec(got[0]))
	if err != nil {
		t.Fatal(err)
	}
	tenant := ""
	for _, h := range got[0].Headers {
		if h.Key == eventid.TenantHeader {
			tenant = string(h.Value)
		}
	}
	if again.ID != first.ID || tenant != "acme" {
		t.Errorf("the dead letter's event ID is %q; replayed, it is %q (dedup-tenant header on the replayed record: %q): "+
			"the replay moved acme's event out of acme's space", first.ID, again.ID, tenant)
	}
}
