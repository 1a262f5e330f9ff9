package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedupio/dedup/client"
	"github.com/dedupio/dedup/processor/eventid"
)

// newOffline is a Client that never reaches Kafka (New does not dial).
func newOffline(t *testing.T, onClose func()) *client.Client {
	t.Helper()
	c, err := client.New(client.Config{Topic: topic, EventID: eventid.DefaultConfig(), Routes: routes, Namespace: "default",
		KafkaOpts: []kgo.Opt{kgo.SeedBrokers("127.0.0.1:1")}, OnClose: onClose})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Guards against: Event.Extensions can change an event's identity.
//
// client.Event's doc: "Time, Subject and Extensions (more ce_ attributes,
// lower-case names) travel in headers; they are not part of the event's
// identity." But Record writes each extension as "ce_"+name, and an
// extension named "source" (a stranger copying CloudEvents attributes into
// Extensions generically, with Event.Source left empty) becomes the
// ce_source header, which is part of the payload hash (and of the content
// rule's ID). Two events the doc calls the same (same key, type, data;
// different extensions) then have two payload hashes: the second is a
// *ConflictError (HTTP 422), never started. Extensions that name a
// CloudEvents context attribute (source, type, id, specversion, time,
// subject, datacontenttype...) should be refused or ignored.
func TestExtensionsAreNotPartOfTheEventIdentity(t *testing.T) {
	c := newOffline(t, nil)
	t.Cleanup(c.Close)
	hash := func(ext map[string]string) [32]byte {
		t.Helper()
		r, err := client.Event{Type: "order.created", IdempotencyKey: "order-1", Data: map[string]int{"total": 1}, Extensions: ext}.Record()
		if err != nil {
			t.Fatal(err)
		}
		p, err := c.Prepare(r)
		if err != nil {
			t.Fatal(err)
		}
		return p.Event.PayloadHash
	}
	// Fixed by refusing an extension named after a context attribute
	// (the CloudEvents spec forbids it): the identity cannot move.
	for _, name := range []string{"source", "type", "id", "Source", "trace-parent"} {
		_, err := client.Event{Type: "order.created", IdempotencyKey: "order-1", Extensions: map[string]string{name: "x"}}.Record()
		var invalid *client.InvalidEventError
		if !errors.As(err, &invalid) || !strings.Contains(err.Error(), name) {
			t.Errorf("extension %q: %v, want an *InvalidEventError naming it", name, err)
		}
	}
	if a, b := hash(map[string]string{"traceparent": "a"}), hash(map[string]string{"traceparent": "b"}); a != b {
		t.Errorf("two events that differ in Extensions only have two payload hashes (%x, %x): the second would be a conflict", a[:4], b[:4])
	}
}

// Guards against: Close twice runs Config.OnClose twice.
//
// OnClose is "for what the caller opened for it (the ledger's pool, the
// Temporal client)"; a second Close (a defer plus an explicit Close on an
// error path: common) closes those twice, and a stranger's OnClose that
// closes a channel panics. Close should be idempotent (sync.Once).
func TestCloseTwiceRunsOnCloseOnce(t *testing.T) {
	n := 0
	done := make(chan struct{})
	c := newOffline(t, func() { n++; close(done) })
	c.Close()
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Errorf("the second Close panicked (OnClose ran again): %v", r)
			}
		}()
		c.Close()
	}()
	if n != 1 {
		t.Errorf("OnClose ran %d times for two Close calls, want 1", n)
	}
}

// Guards against: a Handle a stranger rebuilds panics.
//
// Handle is a struct of exported fields (EventID, IDRule, Workflows, ...)
// with an unexported *Client inside, and Workflow an unexported payload
// hash. A producer that stores the handle (e.g. as JSON, next to its
// order) and rebuilds it later to ask Status or Result gets a nil pointer
// dereference, not an error: nothing in the exported API says a Handle is
// usable only as returned by Enqueue/Send. (Client.Status(ctx, id) is the
// way, but the type invites the mistake; an error such as "handle not
// from this client" would be the stranger-proof answer.)
func TestRestoredHandleDoesNotPanic(t *testing.T) {
	stored, err := json.Marshal(client.Handle{EventID: "order-1", IDRule: eventid.RuleHeader,
		Workflows: []client.Workflow{{ID: "activity-order-confirmation:order-1", ActivityID: "order-confirmation", Namespace: "default"}}})
	if err != nil {
		t.Fatal(err)
	}
	var h client.Handle
	if err := json.Unmarshal(stored, &h); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("Status of a handle rebuilt from its exported fields panics: %v", r)
		}
	}()
	if _, err := h.Status(context.Background()); err == nil {
		t.Errorf("Status of a handle with no client: no error")
	}
}

// After Close, Enqueue says ErrClosed (permanent), not a *ProduceError
// that says a retry is safe.
func TestEnqueueAfterCloseIsErrClosed(t *testing.T) {
	c := newOffline(t, nil)
	c.Close()
	_, err := c.Enqueue(context.Background(), client.Event{Type: "order.created", IdempotencyKey: "order-1"})
	var pe *client.ProduceError
	if !errors.Is(err, client.ErrClosed) || errors.As(err, &pe) {
		t.Errorf("Enqueue after Close: %v, want ErrClosed", err)
	}
}
