package processor

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/dedupio/dedup/processor/decide"
)

// A claimer held in a claim while the next polls are decided claims the
// two polls waiting for it in one statement once it is free, in poll
// order (gatherPolls), with the verdicts they would have had apart: the
// copy of d is a duplicate, of the start in flight or of the started row,
// and Temporal hears of d once. No claim holds more than claimPolls polls.
func TestAClaimerThatFellBehindClaimsTheWaitingPollsInOneStatement(t *testing.T) {
	e := newTestEnv(t, 1, envOpt{})
	cfg := e.config()
	cfg.MaxPollRecords = 2
	hold := make(chan struct{})
	var once sync.Once
	e.led.setAfterClaim(func([]decide.Intent) { once.Do(func() { <-hold }) })
	ids := []string{"a", "b", "c", "d", "d", "e", "f", "g"}
	for _, id := range ids {
		e.produce(0, id, "v")
	}
	rn := e.start("r1", cfg)
	polled := func() float64 {
		var m dto.Metric
		if err := rn.r.m.records.Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetCounter().GetValue()
	}
	// Held in its first claim: the poller decides the next poll, hands it
	// over, decides one more and waits to hand it over too.
	eventually(t, 10*time.Second, func() bool {
		n := polled()
		time.Sleep(200 * time.Millisecond)
		return len(e.led.claimLog()) == 1 && n > float64(len(e.led.claimLog()[0])) && polled() == n
	}, func() string {
		return fmt.Sprintf("claims %d, records polled %v: want the first claim held and the poller waiting", len(e.led.claimLog()), polled())
	})
	close(hold)
	e.waitCommittedToEnd(10 * time.Second)
	if err := rn.stop(); err != nil {
		t.Fatal(err)
	}
	var got []string
	merged := false
	for _, c := range e.led.claimLog() {
		if len(c) > claimPolls*cfg.MaxPollRecords {
			t.Errorf("a claim of %d intents: more than %d polls of %d", len(c), claimPolls, cfg.MaxPollRecords)
		}
		merged = merged || len(c) > cfg.MaxPollRecords
		for _, in := range c {
			got = append(got, in.EventID)
		}
	}
	if !slices.Equal(got, ids) {
		t.Errorf("claimed %q, want %q: the polls in their order", got, ids)
	}
	if !merged {
		t.Errorf("claims %d, none of more than one poll: the polls that waited for the claimer were claimed one by one", len(e.led.claimLog()))
	}
	for _, id := range ids {
		if n := len(e.starter.executionsOf(wid(id))); n != 1 {
			t.Errorf("%s: %d executions, want 1", id, n)
		}
	}
	if c := e.starter.callCount(wid("d")); c != 1 {
		t.Errorf("Temporal start calls for d: %d, want 1", c)
	}
	if !e.atEnd() {
		t.Errorf("committed %v, ends %v", e.committed(), e.ends())
	}
}
