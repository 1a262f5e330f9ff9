//go:build knownlimits

package processor

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
)

// Known limits, not fixed: tests that fail on purpose, kept out of the
// suite (go test -tags knownlimits ./processor/ runs them).
// docs/testing.md, "Known limits".
//
//   - franz-go sends ListOffsets, OffsetFetch and OffsetCommit to a broker
//     on one connection (cxnNormal), answered in order. The lag watch's
//     requests left it (lagClient), and a gap is classified without one,
//     but the consumer's own offset reset (kgo's ListOffsets, when the
//     group's offset fell out of the log) is franz-go's: a slow answer to
//     it sent before the stop holds the final commit until its deadline
//     cuts it. Nothing is lost: the next owner re-drives what finished.
//   - A broker whose fetches do not say where the log starts (Fetch
//     before v5: Kafka before 0.11) has the lag watch ask (checkGap, on
//     the lag watch's client); a stop that closes that client before the
//     answer leaves the gap uncounted when the final commit passes it.

// Adversary 51b: a router stopped while its consumer's own offset reset
// (kgo's ListOffsets of the log start, for a partition whose committed
// offset retention deleted) is answered slowly still commits, when Run
// returns, what it started on its other partition. The lag watch and the
// gap check left the router's connection for ListOffsets, OffsetFetch and
// OffsetCommit (cxnNormal, answered in order), but kgo's reset still
// sends its ListOffsets there: the final commit's OffsetFetch waits behind
// it until the shutdown's deadline cuts it.
func TestAStopWhileTheConsumersOffsetResetIsSlowStillCommitsWhatStarted(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 2, envOpt{})
	e.produce(1, "x", "v") // p1 offsets 0..2
	e.produce(1, "y", "v")
	e.produce(1, "z", "v")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var os kadm.Offsets
	os.AddOffset(testTopic, 0, 0, -1)
	os.AddOffset(testTopic, 1, 1, -1) // the group read x
	resp, err := e.adm.CommitOffsets(ctx, e.group, os)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	// Retention deletes y: p1's committed offset is before its log start.
	if _, err := e.adm.DeleteRecords(ctx, kadm.Offsets{testTopic: {1: {Topic: testTopic, Partition: 1, At: 2}}}); err != nil {
		t.Fatal(err)
	}
	hold := make(chan struct{})
	var holdOnce sync.Once
	release := func() { holdOnce.Do(func() { close(hold) }) }
	defer release()
	var held atomic.Bool
	e.cluster.ControlKey(kmsg.ListOffsets.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		e.cluster.KeepControl()
		start := false
		for _, tp := range req.(*kmsg.ListOffsetsRequest).Topics {
			for _, p := range tp.Partitions {
				start = start || (p.Partition == 1 && p.Timestamp == -2)
			}
		}
		if start && !held.Swap(true) {
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
	e.produce(0, "a", "v")         // p0 offset 0
	rn := e.start("r1", cfg)
	eventually(t, 10*time.Second, func() bool { return e.led.state(wid("a")) == stateStarted }, func() string { return "a not marked" })
	eventually(t, 10*time.Second, held.Load, func() string { return "no reset ListOffsets of p1 reached the broker" })
	err = rn.stop()
	if err != nil {
		t.Errorf("Run: %v", err)
	}
	if rn.took > cfg.DrainTimeout+time.Second {
		t.Errorf("Run returned %v after cancel; want within drain_timeout (%v) + 1s", rn.took, cfg.DrainTimeout)
	}
	if c := e.committed()[0]; c != 1 {
		t.Errorf("p0 committed %d when Run returned (after %v), want 1: a was started and marked before the stop", c, rn.took)
	}
	release()
}

// Adversary 51b: with a broker whose fetches do not say where the log
// starts (Fetch v4), a retention gap seen before a stop is counted even
// when its log-start check (checkGap's ListOffsets, on the lag watch's
// client) is answered in 500 ms, well within drain_timeout: the stop
// closes the lag client under the check, which gives up, and the final
// commit moves the group past the gap, so no replica ever sees it again:
// records 3..5 are lost in silence.
func TestARetentionGapSeenJustBeforeAStopIsStillCounted(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 1, envOpt{})
	for _, id := range []string{"a", "b", "c"} {
		e.produce(0, id, "v")
	}
	first := e.start("r1", e.config())
	e.waitCommittedToEnd(10 * time.Second)
	if err := first.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	for _, id := range []string{"d", "e", "f", "g", "h"} { // offsets 3..7
		e.produce(0, id, "v")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := e.adm.DeleteRecords(ctx, kadm.Offsets{testTopic: {0: {Topic: testTopic, Partition: 0, At: 6}}}); err != nil {
		t.Fatal(err)
	}
	var starts atomic.Int32
	e.cluster.ControlKey(kmsg.ListOffsets.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		e.cluster.KeepControl()
		start := false
		for _, tp := range req.(*kmsg.ListOffsetsRequest).Topics {
			for _, p := range tp.Partitions {
				start = start || p.Timestamp == -2
			}
		}
		if start {
			starts.Add(1)
			e.cluster.SleepControl(func() { time.Sleep(500 * time.Millisecond) })
		}
		return nil, nil, false
	})
	v := kversion.Stable()
	v.SetMaxKeyVersion(kmsg.Fetch.Int16(), 4)
	cfg := e.config()
	cfg.DrainTimeout = minDrainTimeout
	rn := e.startOpts("r2", cfg, kgo.MaxVersions(v))
	eventually(t, 10*time.Second, func() bool {
		return e.led.state(wid("g")) == stateStarted && e.led.state(wid("h")) == stateStarted
	}, func() string { return "g and h not marked" })
	if err := rn.stop(); err != nil {
		t.Errorf("Run: %v", err)
	}
	if c := e.committed()[0]; c != 8 {
		t.Fatalf("committed %d, want 8 (the scenario: the group moved past the gap)", c)
	}
	if l := lostOf(t, rn); l != 3 {
		t.Errorf("dedup_records_lost_total %v when Run returned (after %v; %d ListOffsets of the log start), want 3: offsets 3..5 were deleted by retention before they were read, and the group has moved past them", l, rn.took, starts.Load())
	}
}
