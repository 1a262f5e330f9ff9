//go:build knownlimits

package processor

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Known limits, not fixed: tests that fail on purpose, kept out of the
// suite (go test -tags knownlimits ./processor/ runs them). franz-go sends
// ListOffsets, OffsetFetch and OffsetCommit to a broker on one connection
// (kgo broker.loadConnection: cxnNormal), answered in order, and v1.22.3
// ends a request at its context's deadline: a ListOffsets of the lag watch
// or of a gap check that the broker answers slowly, sent before the stop,
// holds the final commit behind it until the commit's deadline cuts it.
// Nothing is lost (the next owner re-drives what this router started);
// the finished prefix is committed later or by the next owner. A client of
// the lag watch's own was tried (adversary 50) and reverted: it ran the
// caller's KafkaOpts hooks a second time (kprom panicked on its second
// registration: TestARouterWithKpromHooksInKafkaOptsKeepsRunningAndExportsKafkaMetrics).
// docs/testing.md, "Known limits".

// Adversary 50 (b, lag): a router stopped while its lag measure's
// ListOffsets is answered slowly (one answer takes 2 s: a loaded broker)
// still commits, when Run returns, what it started before the stop. The
// lag measure's ListOffsets and the final commit's OffsetFetch and
// OffsetCommit share franz-go's normal connection to the broker (kgo
// broker.loadConnection: "list offsets stays on cxnNormal"), whose answers
// come in order: the shutdown cancels the measure, but the request is
// sent, and the final commit's requests wait behind it. Before v1.22.3
// the commit waited and landed late; now its deadline cuts it, and the
// next owner re-drives a.
func TestAStopWhileALagMeasureIsSlowStillCommitsWhatStarted(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 1, envOpt{})
	var armed, held atomic.Bool
	slept := make(chan struct{}) // ends the held answer when the test does
	defer close(slept)
	e.cluster.ControlKey(kmsg.ListOffsets.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		e.cluster.KeepControl()
		if armed.Load() && !held.Swap(true) {
			e.cluster.SleepControl(func() {
				select {
				case <-time.After(2 * time.Second):
				case <-slept:
				}
			})
		}
		return nil, nil, false
	})
	cfg := e.config()
	cfg.DrainTimeout = minDrainTimeout
	cfg.CommitInterval = time.Hour // the final commit is the only one
	e.produce(0, "a", "v")
	rn := e.start("r1", cfg)
	eventually(t, 10*time.Second, func() bool { return e.led.state(wid("a")) == stateStarted }, func() string { return "a not marked" })
	armed.Store(true)
	eventually(t, 10*time.Second, held.Load, func() string { return "no lag measure's ListOffsets reached the broker" })
	err := rn.stop()
	if err != nil {
		t.Errorf("Run: %v", err)
	}
	if rn.took > cfg.DrainTimeout+time.Second {
		t.Errorf("Run returned %v after cancel; want within drain_timeout (%v) + 1s", rn.took, cfg.DrainTimeout)
	}
	if c := e.committed()[0]; c != 1 {
		t.Errorf("committed %d when Run returned (after %v), want 1: a was started and marked before the stop", c, rn.took)
	}
}

// Adversary 50d (d, lag client close): a router stopped while its lag
// measure's ListOffsets is held by the broker for good (not 2 s: a broker
// that never answers it) returns within drain_timeout and commits what
// finished: lagWatch.run closes its own client before loops.Wait returns,
// and the final commit waits for loops.Wait.
func TestAStopWhileALagMeasureIsHeldForGoodStillCommitsWhatStarted(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 1, envOpt{})
	arm, held, release := e.holdKeyOnce(kmsg.ListOffsets.Int16())
	defer release()
	cfg := e.config()
	cfg.DrainTimeout = minDrainTimeout
	cfg.CommitInterval = time.Hour // the final commit is the only one
	e.produce(0, "a", "v")
	rn := e.start("r1", cfg)
	eventually(t, 10*time.Second, func() bool { return e.led.state(wid("a")) == stateStarted }, func() string { return "a not marked" })
	arm()
	eventually(t, 10*time.Second, held.Load, func() string { return "no lag measure's ListOffsets reached the broker" })
	time.Sleep(100 * time.Millisecond)
	err := rn.stop()
	if err != nil {
		t.Errorf("Run: %v", err)
	}
	if rn.took > cfg.DrainTimeout+time.Second {
		t.Errorf("Run returned %v after cancel; want within drain_timeout (%v) + 1s", rn.took, cfg.DrainTimeout)
	}
	if c := e.committed()[0]; c != 1 {
		t.Errorf("committed %d when Run returned (after %v), want 1: a was started and marked before the stop", c, rn.took)
	}
	release()
}

// Adversary 50d (d, gap check): the lag watch's gap check (checkGap: a
// ListStartOffsets when a poll skips offsets, as read_committed does over
// an aborted transaction) still goes on the router's own client (l.adm),
// where 229690d moved only the lag measure off: franz-go sends
// ListOffsets, OffsetFetch and OffsetCommit to a broker on one
// connection, answered in order, so a gap check the broker is slow to
// answer holds the shutdown's final commit behind it. A router stopped
// then must still commit, when Run returns, what it started before the
// stop. The check's ListOffsets (earliest, timestamp -2; the lag measure
// asks for the latest, -1) is held for 60 s (released at the end).
func TestAStopWhileAGapCheckIsSlowStillCommitsWhatStarted(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 1, envOpt{})
	hold := make(chan struct{})
	var holdOnce sync.Once
	release := func() { holdOnce.Do(func() { close(hold) }) }
	defer release()
	var armed, held atomic.Bool
	e.cluster.ControlKey(kmsg.ListOffsets.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		e.cluster.KeepControl()
		earliest := false
		for _, tp := range req.(*kmsg.ListOffsetsRequest).Topics {
			for _, p := range tp.Partitions {
				earliest = earliest || p.Timestamp == -2
			}
		}
		if earliest && armed.Load() && !held.Swap(true) {
			e.cluster.SleepControl(func() {
				select {
				case <-hold:
				case <-time.After(60 * time.Second):
				}
			})
		}
		return nil, nil, false
	})
	cfg := e.config()
	cfg.DrainTimeout = minDrainTimeout
	cfg.CommitInterval = time.Hour // the final commit is the only one
	e.produce(0, "a", "v")         // offset 0
	rn := e.start("r1", cfg)
	eventually(t, 10*time.Second, func() bool { return e.led.state(wid("a")) == stateStarted }, func() string { return "a not marked" })
	armed.Store(true)
	tx := e.txProducer("gap")
	tx.begin(txEvent{0, "aborted"}) // offset 1, skipped by read_committed
	tx.end(false)                   // offset 2: the abort marker
	e.produce(0, "b", "v")          // offset 3
	eventually(t, 10*time.Second, func() bool { return e.led.state(wid("b")) == stateStarted && held.Load() },
		func() string {
			return fmt.Sprintf("b marked %v, gap check's ListOffsets held %v", e.led.state(wid("b")) == stateStarted, held.Load())
		})
	err := rn.stop()
	if err != nil {
		t.Errorf("Run: %v", err)
	}
	if rn.took > cfg.DrainTimeout+time.Second {
		t.Errorf("Run returned %v after cancel; want within drain_timeout (%v) + 1s", rn.took, cfg.DrainTimeout)
	}
	if c := e.committed()[0]; c != 4 {
		t.Errorf("committed %d when Run returned (after %v), want 4: a and b were started and marked before the stop, the aborted record and its marker are done", c, rn.took)
	}
	release()
}
