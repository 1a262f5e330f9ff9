package devstack

import (
	"context"
	"testing"
	"time"

	"github.com/dedupio/dedup/worker/tenants"
)

// The dev stack's mailbox takes the worker's mail over plain SMTP on
// loopback and keeps one message per Message-ID: a repeat is counted as
// dropped.
func TestMailboxDropsRepeatedMessageIDs(t *testing.T) {
	mb, err := StartMailbox()
	if err != nil {
		t.Fatal(err)
	}
	defer mb.Close()
	m, err := tenants.NewMailer(tenants.SMTPConfig{Host: mb.Host(), Port: mb.Port(), From: "hello@dedup.dev"}, "worker.tenants.smtp")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, id := range []string{"<a@dedup.invalid>", "<a@dedup.invalid>", "<b@dedup.invalid>"} {
		if err := m.Send(ctx, "owner@acme.example", "From: hello@dedup.dev\r\nTo: owner@acme.example\r\nMessage-ID: "+id+"\r\n\r\nhi\r\n"); err != nil {
			t.Fatal(err)
		}
	}
	if c := mb.Counts(); c != (MailCounts{Messages: 3, Deliveries: 2, Dropped: 1}) {
		t.Fatalf("counts %+v, want 3 messages, 2 delivered, 1 dropped", c)
	}
}
