package client_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/dedupio/dedup/client"
)

// An Enqueue whose record is in flight when the Client closes (a
// producer shutting down mid-request; franz-go v1.22.3 ends a request cut
// short by Close with kgo.ErrClientClosed at once) returns promptly, with
// ErrClosed or a *ProduceError (may or may not be written: retry with the
// same key), and Close does not wait for the broker.
func TestAnEnqueueInFlightWhenTheClientClosesEndsPromptly(t *testing.T) {
	c, cluster := kafkaOnly(t, nil, nil)
	hold := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(hold) }) }
	t.Cleanup(release)
	held := make(chan struct{}, 1)
	cluster.ControlKey(kmsg.Produce.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		select {
		case held <- struct{}{}:
		default:
		}
		cluster.SleepControl(func() {
			select {
			case <-hold:
			case <-time.After(30 * time.Second):
			}
		})
		return nil, nil, false
	})
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err := c.Enqueue(ctx, client.Event{Type: "order.created", IdempotencyKey: "order-closing", Data: map[string]int{"total": 1}})
		done <- err
	}()
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("the record never reached the broker")
	}
	closed := make(chan struct{})
	go func() { c.Close(); close(closed) }()
	select {
	case err := <-done:
		var pe *client.ProduceError
		if !errors.Is(err, client.ErrClosed) && !errors.As(err, &pe) {
			t.Errorf("Enqueue cut short by Close: %v, want ErrClosed or a *ProduceError", err)
		}
		t.Logf("Enqueue cut short by Close: %v", err)
	case <-time.After(5 * time.Second):
		t.Error("Enqueue still waiting 5 s after Close")
	}
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Error("Close still waiting 5 s after it was called, with a record in flight")
	}
	release()
	<-closed
}
