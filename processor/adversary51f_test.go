package processor

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
)

// Adversary 51f: the lag watch remembers counted gaps by their `from`
// alone. A partition lost and assigned back to the same router is read
// again from the group's offset (3); meanwhile retention deleted more
// (i, j at 8, 9: never read by anyone), so the new assignment's gap is
// [3,10), not [3,6). Its from is the one counted before, and the new loss
// of i and j is skipped as "already counted": lost in silence.
func TestAGapThatGrewWhileItsPartitionWasAwayCountsTheNewlyDeletedRecords(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 1, envOpt{})
	for _, id := range []string{"a", "b", "c"} {
		e.produce(0, id, "v")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var os kadm.Offsets
	os.AddOffset(testTopic, 0, 3, -1)
	resp, err := e.adm.CommitOffsets(ctx, e.group, os)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"d", "e", "f", "g", "h"} { // offsets 3..7
		e.produce(0, id, "v")
	}
	if _, err := e.adm.DeleteRecords(ctx, kadm.Offsets{testTopic: {0: {Topic: testTopic, Partition: 0, At: 6}}}); err != nil {
		t.Fatal(err)
	}
	releaseG := e.starter.block(wid("g"))
	defer releaseG()
	var armed atomic.Bool
	var refused atomic.Int32
	e.cluster.ControlKey(kmsg.Heartbeat.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		e.cluster.KeepControl()
		if !armed.Load() || refused.Load() > 0 {
			return nil, nil, false
		}
		refused.Add(1)
		resp := req.ResponseKind().(*kmsg.HeartbeatResponse)
		resp.ErrorCode = kerr.UnknownMemberID.Code
		return resp, nil, true
	})
	// The rejoin after the loss is held while retention deletes more.
	armJoin, joinHeld, releaseJoin := e.holdKeyOnce(kmsg.JoinGroup.Int16())
	defer releaseJoin()
	rn := e.start("r2", e.config())
	eventually(t, 10*time.Second, func() bool { return e.starter.callCount(wid("g")) >= 1 }, func() string { return "g not started" })
	eventually(t, 5*time.Second, func() bool { return lostOf(t, rn) == 3 }, func() string {
		return fmt.Sprintf("%v records counted lost, want 3 (offsets 3..5) before the loss", lostOf(t, rn))
	})
	partsLost := func() float64 {
		var m dto.Metric
		if err := rn.r.m.partitionsGone.WithLabelValues("lost").Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetCounter().GetValue()
	}
	armJoin()
	armed.Store(true)
	eventually(t, 10*time.Second, func() bool { return partsLost() >= 1 }, func() string { return "the partition was not lost" })
	eventually(t, 10*time.Second, joinHeld.Load, func() string { return "the rejoin was not held" })
	for _, id := range []string{"i", "j", "k"} { // offsets 8..10, while nobody owns the partition
		e.produce(0, id, "v")
	}
	if _, err := e.adm.DeleteRecords(ctx, kadm.Offsets{testTopic: {0: {Topic: testTopic, Partition: 0, At: 10}}}); err != nil {
		t.Fatal(err)
	}
	releaseJoin()
	eventually(t, 10*time.Second, func() bool { return len(rn.owned()) == 1 }, func() string { return "the partition was not assigned back" })
	releaseG()
	eventually(t, 10*time.Second, func() bool { return e.starter.callCount(wid("k")) == 1 }, func() string { return "k not started" })
	e.waitCommittedToEnd(10 * time.Second)
	for _, id := range []string{"i", "j"} {
		if n := e.starter.callCount(wid(id)); n != 0 {
			t.Fatalf("%s started %d times; the scenario expects it deleted unread", id, n)
		}
	}
	eventually(t, 5*time.Second, func() bool { return lostOf(t, rn) >= 5 }, func() string {
		return fmt.Sprintf("dedup_records_lost_total %v, want at least 5: 3..5 and 8..9 (i, j) were deleted by retention and never read; the second gap [3,10) was skipped as already counted because its from (3) matched the first [3,6)", lostOf(t, rn))
	})
	if err := rn.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// Adversary 51f: with a broker whose fetches do not say where the log
// starts (Fetch v4), the gap is classified by checkGap's ListOffsets of
// the log start. That one answer failing for the partition with an error
// kgo does not retry (UNKNOWN_SERVER_ERROR, once; NOT_LEADER_FOR_PARTITION
// is retried by kgo and holds) drops the gap for good: no retry, the
// router commits past it, and no later poll shows it again. 3..5 deleted
// by retention before they were read are lost in silence, against "never
// missed".
func TestARetentionGapWhoseLogStartCheckFailsOnceIsStillCounted(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 1, envOpt{})
	for _, id := range []string{"a", "b", "c"} {
		e.produce(0, id, "v")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var os kadm.Offsets
	os.AddOffset(testTopic, 0, 3, -1)
	resp, err := e.adm.CommitOffsets(ctx, e.group, os)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"d", "e", "f", "g", "h"} { // offsets 3..7
		e.produce(0, id, "v")
	}
	if _, err := e.adm.DeleteRecords(ctx, kadm.Offsets{testTopic: {0: {Topic: testTopic, Partition: 0, At: 6}}}); err != nil {
		t.Fatal(err)
	}
	var checks atomic.Int32
	e.cluster.ControlKey(kmsg.ListOffsets.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		e.cluster.KeepControl()
		r := req.(*kmsg.ListOffsetsRequest)
		start := false
		for _, tp := range r.Topics {
			for _, p := range tp.Partitions {
				start = start || p.Timestamp == -2
			}
		}
		if !start || r.IsolationLevel != 0 || checks.Add(1) != 1 { // the lag watch's first gap check only
			return nil, nil, false
		}
		resp := r.ResponseKind().(*kmsg.ListOffsetsResponse)
		for _, tp := range r.Topics {
			rt := kmsg.NewListOffsetsResponseTopic()
			rt.Topic = tp.Topic
			for _, p := range tp.Partitions {
				rp := kmsg.NewListOffsetsResponseTopicPartition()
				rp.Partition = p.Partition
				rp.ErrorCode = kerr.UnknownServerError.Code
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp, nil, true
	})
	v := kversion.Stable()
	v.SetMaxKeyVersion(kmsg.Fetch.Int16(), 4)
	rn := e.startOpts("r2", e.config(), kgo.MaxVersions(v))
	e.waitCommittedToEnd(10 * time.Second)
	if checks.Load() < 1 {
		t.Fatal("no gap check came: the fetch said where the log starts (Fetch v4 does not)")
	}
	eventually(t, 5*time.Second, func() bool { return lostOf(t, rn) == 3 }, func() string {
		return fmt.Sprintf("dedup_records_lost_total %v, want 3: offsets 3..5 were deleted by retention before they were read; the one log-start check answered UNKNOWN_SERVER_ERROR once and the gap was dropped, the group's offset is past it (%d checks)", lostOf(t, rn), checks.Load())
	})
	if err := rn.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// Adversary 51f: with a broker whose fetches do not say where the log
// starts (Fetch v4), gaps seen while a log-start check runs wait for it,
// at most 16; the 17th on is dropped unchecked. Gaps that are not loss
// (aborted transactions here, compaction on a compacted topic) fill the
// queue while one check is slow, and a retention gap seen behind them is
// never checked nor counted: 3 records deleted before they were read are
// lost in silence, against "never missed".
func TestARetentionGapBehindSixteenQueuedHarmlessGapsIsCounted(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 1, envOpt{})
	checkHeld, releaseCheck := make(chan struct{}), make(chan struct{})
	var checkOnce, relOnce sync.Once
	relCheck := func() { relOnce.Do(func() { close(releaseCheck) }) }
	defer relCheck()
	var checks atomic.Int32
	e.cluster.ControlKey(kmsg.ListOffsets.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		e.cluster.KeepControl()
		r := req.(*kmsg.ListOffsetsRequest)
		start := false
		for _, tp := range r.Topics {
			for _, p := range tp.Partitions {
				start = start || p.Timestamp == -2
			}
		}
		if start && r.IsolationLevel == 0 && checks.Add(1) == 1 { // the lag watch's first gap check
			checkOnce.Do(func() { close(checkHeld) })
			e.cluster.SleepControl(func() {
				select {
				case <-releaseCheck:
				case <-time.After(30 * time.Second):
				}
			})
		}
		return nil, nil, false
	})
	var holdAt atomic.Int64
	holdAt.Store(-1)
	fetchHeld, releaseFetch := make(chan struct{}), make(chan struct{})
	var fetchOnce, relFetchOnce sync.Once
	relFetch := func() { relFetchOnce.Do(func() { close(releaseFetch) }) }
	defer relFetch()
	e.cluster.ControlKey(kmsg.Fetch.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		e.cluster.KeepControl()
		at := holdAt.Load()
		hold := false
		for _, tp := range req.(*kmsg.FetchRequest).Topics {
			for _, p := range tp.Partitions {
				hold = hold || (at >= 0 && p.FetchOffset == at)
			}
		}
		if hold {
			fetchOnce.Do(func() { close(fetchHeld) })
			e.cluster.SleepControl(func() {
				select {
				case <-releaseFetch:
				case <-time.After(30 * time.Second):
				}
			})
		}
		return nil, nil, false
	})
	e.produce(0, "a", "v") // offset 0
	v := kversion.Stable()
	v.SetMaxKeyVersion(kmsg.Fetch.Int16(), 4)
	logs := &logLines{}
	r, err := New(e.config(), Options{Ledger: e.led, DeadLetterLog: e.dlq, Starter: e.starter.as("r2"), Log: slog.New(logs),
		KafkaOpts: []kgo.Opt{kgo.MaxVersions(v), kgo.HeartbeatInterval(100 * time.Millisecond), kgo.MetadataMinAge(50 * time.Millisecond)}})
	if err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithCancel(context.Background())
	rn := &runner{t: t, r: r, cancel: rcancel, done: make(chan error, 1)}
	go func() { rn.done <- r.Run(rctx) }()
	t.Cleanup(func() { _ = rn.stop() })
	eventually(t, 10*time.Second, func() bool { return e.starter.callCount(wid("a")) == 1 }, func() string { return "a not started" })
	tx := e.txProducer("adv51f")
	for i := range 17 { // 17 harmless gaps: one checked (held), 16 queued
		tx.begin(txEvent{0, fmt.Sprintf("aborted%d", i)})
		tx.end(false)
		id := fmt.Sprintf("n%d", i)
		e.produce(0, id, "v")
		eventually(t, 10*time.Second, func() bool { return e.starter.callCount(wid(id)) == 1 }, func() string { return id + " not started" })
		if i == 0 {
			select {
			case <-checkHeld:
			case <-time.After(10 * time.Second):
				t.Fatal("no gap check after the first aborted transaction: the fetch said where the log starts (Fetch v4 does not)")
			}
		}
	}
	// The retention gap: the router's fetch from x is held while x..x+2
	// are produced and deleted.
	x := e.ends()[0]
	holdAt.Store(x)
	select {
	case <-fetchHeld:
	case <-time.After(10 * time.Second):
		t.Fatalf("the router never fetched from %d", x)
	}
	for _, id := range []string{"r0", "r1", "r2"} { // x..x+2
		e.produce(0, id, "v")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := e.adm.DeleteRecords(ctx, kadm.Offsets{testTopic: {0: {Topic: testTopic, Partition: 0, At: x + 3}}}); err != nil {
		t.Fatal(err)
	}
	e.produce(0, "after", "v") // x+3
	relFetch()
	eventually(t, 10*time.Second, func() bool { return e.starter.callCount(wid("after")) == 1 }, func() string { return "after not started" })
	for _, id := range []string{"r0", "r1", "r2"} {
		if n := e.starter.callCount(wid(id)); n != 0 {
			t.Fatalf("%s started %d times; the scenario expects it deleted unread", id, n)
		}
	}
	relCheck()
	e.waitCommittedToEnd(10 * time.Second)
	named := func() bool {
		for _, l := range logs.all() {
			if strings.Contains(l, "deleted by retention") && strings.Contains(l, fmt.Sprintf(" from=%d ", x)) {
				return true
			}
		}
		return false
	}
	eventually(t, 10*time.Second, named, func() string {
		return fmt.Sprintf("no error log names the retention gap from %d (offsets %d..%d deleted before they were read): it came behind 16 queued gap checks and was dropped (%d checks sent; dedup_records_lost_total %v)", x, x, x+2, checks.Load(), lostOf(t, rn))
	})
	if err := rn.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// Adversary 51f: with a broker whose fetches do not say where the log
// starts (Fetch v4), a gap's check asks where the log starts now, not when
// the gap was read; gaps queued behind a slow check are asked late. Two
// aborted transactions (nothing lost: read_committed skips them) read,
// started around and committed past; then ordinary retention deletes the
// consumed records; the checks answer after it, with a log start past
// both gaps, and both are counted as records deleted before they were
// read.
func TestAnAbortedTransactionsGapCheckedAfterRetentionPassedItIsNotCountedLost(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 1, envOpt{})
	checkHeld, releaseCheck := make(chan struct{}), make(chan struct{})
	var checkOnce, relOnce sync.Once
	relCheck := func() { relOnce.Do(func() { close(releaseCheck) }) }
	defer relCheck()
	var checks atomic.Int32
	e.cluster.ControlKey(kmsg.ListOffsets.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		e.cluster.KeepControl()
		r := req.(*kmsg.ListOffsetsRequest)
		start := false
		for _, tp := range r.Topics {
			for _, p := range tp.Partitions {
				start = start || p.Timestamp == -2
			}
		}
		if start && r.IsolationLevel == 0 && checks.Add(1) == 1 { // the lag watch's first gap check
			checkOnce.Do(func() { close(checkHeld) })
			e.cluster.SleepControl(func() {
				select {
				case <-releaseCheck:
				case <-time.After(30 * time.Second):
				}
			})
		}
		return nil, nil, false
	})
	e.produce(0, "a", "v") // offset 0
	v := kversion.Stable()
	v.SetMaxKeyVersion(kmsg.Fetch.Int16(), 4)
	rn := e.startOpts("r2", e.config(), kgo.MaxVersions(v))
	eventually(t, 10*time.Second, func() bool { return e.starter.callCount(wid("a")) == 1 }, func() string { return "a not started" })
	tx := e.txProducer("adv51f-late")
	for i := range 2 { // the first gap's check is held, the second queued
		tx.begin(txEvent{0, fmt.Sprintf("aborted%d", i)})
		tx.end(false)
		id := fmt.Sprintf("n%d", i)
		e.produce(0, id, "v")
		eventually(t, 10*time.Second, func() bool { return e.starter.callCount(wid(id)) == 1 }, func() string { return id + " not started" })
		if i == 0 {
			select {
			case <-checkHeld:
			case <-time.After(10 * time.Second):
				t.Fatal("no gap check after the aborted transaction: the fetch said where the log starts (Fetch v4 does not)")
			}
		}
	}
	e.waitCommittedToEnd(10 * time.Second)
	// Retention deletes what the group read and committed.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	end := e.ends()[0]
	if _, err := e.adm.DeleteRecords(ctx, kadm.Offsets{testTopic: {0: {Topic: testTopic, Partition: 0, At: end}}}); err != nil {
		t.Fatal(err)
	}
	relCheck()
	eventually(t, 10*time.Second, func() bool { return checks.Load() >= 2 }, func() string { return "the queued gap was never checked" })
	stays(t, 3*e.config().LagInterval, func() bool { return lostOf(t, rn) == 0 }, func() string {
		return fmt.Sprintf("dedup_records_lost_total %v, want 0: the gaps were aborted transactions, read past and committed before retention deleted anything; their checks, answered after it, took today's log start (%d) for theirs", lostOf(t, rn), end)
	})
	if err := rn.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// Adversary 51f (holds): with a broker whose fetches do not say where the
// log starts (Fetch v4), a stop while a gap's check is held for good and
// a second gap waits for it: the queued check is not sent on the router's
// client once the lag client closes (the partition's context ends with
// the drain, before), Run returns within drain_timeout + 1s, the final
// commit lands, and no check goroutine is left (TestMain's goleak).
func TestAStopWithAGapCheckHeldAndAnotherQueuedStillCommitsAndLeavesNoCheckBehind(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 1, envOpt{})
	hold := make(chan struct{})
	var holdOnce sync.Once
	release := func() { holdOnce.Do(func() { close(hold) }) }
	defer release()
	var checks atomic.Int32
	e.cluster.ControlKey(kmsg.ListOffsets.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		e.cluster.KeepControl()
		r := req.(*kmsg.ListOffsetsRequest)
		start := false
		for _, tp := range r.Topics {
			for _, p := range tp.Partitions {
				start = start || p.Timestamp == -2
			}
		}
		if start && r.IsolationLevel == 0 { // every lag-watch gap check, on whichever client
			checks.Add(1)
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
	e.produce(0, "a", "v")
	v := kversion.Stable()
	v.SetMaxKeyVersion(kmsg.Fetch.Int16(), 4)
	rn := e.startOpts("r1", cfg, kgo.MaxVersions(v))
	eventually(t, 10*time.Second, func() bool { return e.led.state(wid("a")) == stateStarted }, func() string { return "a not marked" })
	tx := e.txProducer("adv51f-stop")
	for i := range 2 {
		tx.begin(txEvent{0, fmt.Sprintf("aborted%d", i)})
		tx.end(false)
		id := fmt.Sprintf("n%d", i)
		e.produce(0, id, "v")
		eventually(t, 10*time.Second, func() bool { return e.led.state(wid(id)) == stateStarted }, func() string { return id + " not marked" })
	}
	if checks.Load() != 1 {
		t.Fatalf("%d gap checks sent, want 1 held (the second gap queued)", checks.Load())
	}
	end := e.ends()[0]
	if err := rn.stop(); err != nil {
		t.Errorf("Run: %v", err)
	}
	if rn.took > cfg.DrainTimeout+time.Second {
		t.Errorf("Run returned %v after cancel; want within drain_timeout (%v) + 1s", rn.took, cfg.DrainTimeout)
	}
	if c := e.committed()[0]; c != end {
		t.Errorf("committed %d when Run returned (after %v), want %d", c, rn.took, end)
	}
	if n := checks.Load(); n != 1 {
		t.Errorf("%d gap checks sent, want 1: the queued one went out after the stop", n)
	}
	release()
}
