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

// Adversary 51d: under kafka.reset_offset latest a gap's lost records are
// counted as the whole range [from, to), to being the first offset polled
// after the reset. Offsets written after the reset that read_committed
// never hands over (an aborted transaction's records) lie between the
// reset point and to: they were neither deleted nor skipped by the reset,
// yet are counted lost. Committed at 3, 3..7 produced, 3..5 deleted by
// retention, the reset lands at 8 (the log end, seen as a fetch from 8);
// then an aborted transaction writes 8 (its record) and 9 (the abort
// marker), and i lands at 10. The reset skipped 3..7: five records.
func TestAResetToLatestDoesNotCountAnAbortedTransactionAfterTheResetAsLost(t *testing.T) {
	e := newTestEnv(t, 1, envOpt{})
	for _, id := range []string{"a", "b", "c"} {
		e.produce(0, id, "v")
	}
	cfg := e.config()
	cfg.ResetOffset = "latest"
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
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
	at8 := make(chan struct{})
	var at8Once sync.Once
	e.cluster.ControlKey(kmsg.Fetch.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		e.cluster.KeepControl()
		for _, tp := range req.(*kmsg.FetchRequest).Topics {
			for _, p := range tp.Partitions {
				if p.FetchOffset == 8 {
					at8Once.Do(func() { close(at8) })
				}
			}
		}
		return nil, nil, false
	})
	rn := e.start("r2", cfg)
	select {
	case <-at8:
	case <-time.After(10 * time.Second):
		t.Fatal("the router never fetched from 8 (the log end)")
	}
	tx := e.txProducer("adv51d-abort")
	tx.begin(txEvent{0, "aborted"}) // offset 8, never handed over by read_committed
	tx.end(false)                   // offset 9: the abort marker
	if off := e.produce(0, "i", "v"); off != 10 {
		t.Fatalf("i at offset %d, the scenario wants 10", off)
	}
	eventually(t, 10*time.Second, func() bool { return e.starter.callCount(wid("i")) == 1 }, func() string { return "i not started" })
	e.waitCommittedToEnd(10 * time.Second)
	stays(t, 3*cfg.LagInterval, func() bool { return lostOf(t, rn) == 5 }, func() string {
		return fmt.Sprintf("dedup_records_lost_total %v, want 5: the reset to latest skipped offsets 3..7; 8 (an aborted transaction's record) and 9 (its marker) were written after the reset and are not lost", lostOf(t, rn))
	})
	if err := rn.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// Adversary 51d: a retention gap is counted only when this router learns
// that its commit passed the gap. A commit that lands at the broker but
// whose answer the router never gets (here the shutdown's final commit, and
// any other of its stop, answered after drain_timeout cut them:
// a broker or network slow at the wrong moment) leaves the gap uncounted
// when the partition is forgotten, and the next owner, reading from the
// offset that landed (past the gap), never sees it: before e4a706e it was
// counted when seen. Committed at 3, 3..7 produced, 3..5 deleted by
// retention; r2 starts g and h (6, 7), its commits of 8 land late; r3
// resumes at 8. Offsets 3..5 are lost and counted by no one.
func TestARetentionGapIsCountedWhenTheCommitPastItLandsButItsAnswerIsLost(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 1, envOpt{})
	for _, id := range []string{"a", "b", "c"} {
		e.produce(0, id, "v")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
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
	wake := make(chan struct{}) // the held commits are processed
	landed := make(chan struct{})
	var wakeOnce, landedOnce sync.Once
	release := func() { wakeOnce.Do(func() { close(wake) }); landedOnce.Do(func() { close(landed) }) }
	defer release()
	var armed atomic.Bool
	armed.Store(true)
	var held atomic.Int32
	e.cluster.ControlKey(kmsg.OffsetCommit.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		e.cluster.KeepControl()
		if armed.Load() {
			held.Add(1)
			e.cluster.SleepControl(func() {
				select {
				case <-wake:
				case <-time.After(20 * time.Second):
				}
			})
		}
		return nil, nil, false
	})
	// The router's leave waits until its commits landed: the member is
	// still in the group (its generation valid) when they are processed.
	e.cluster.ControlKey(kmsg.LeaveGroup.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		e.cluster.KeepControl()
		e.cluster.SleepControl(func() {
			select {
			case <-landed:
			case <-time.After(20 * time.Second):
			}
		})
		return nil, nil, false
	})
	cfg := e.config()
	cfg.CommitInterval = time.Hour // the shutdown's commits are the only ones
	cfg.DrainTimeout = minDrainTimeout
	cfg.SessionTimeout = 10 * time.Second // r2 stays in the group until its leave
	r2 := e.start("r2", cfg)
	for _, id := range []string{"g", "h"} {
		eventually(t, 10*time.Second, func() bool { return e.led.state(wid(id)) == stateStarted }, func() string { return id + " not marked by r2" })
	}
	if err := r2.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if held.Load() == 0 {
		t.Fatal("r2 sent no commit")
	}
	armed.Store(false)
	wakeOnce.Do(func() { close(wake) })
	eventually(t, 5*time.Second, func() bool { return e.committed()[0] == 8 }, func() string {
		return fmt.Sprintf("r2's late commit did not land: the group's offset is %d, the scenario wants 8", e.committed()[0])
	})
	landedOnce.Do(func() { close(landed) })
	r3 := e.start("r3", e.config())
	r3.waitJoined()
	if off := e.produce(0, "i", "v"); off != 8 {
		t.Fatalf("i at offset %d, the scenario wants 8", off)
	}
	eventually(t, 10*time.Second, func() bool { return e.starter.callCount(wid("i")) == 1 }, func() string { return "i not started by r3" })
	e.waitCommittedToEnd(10 * time.Second)
	stays(t, 3*e.config().LagInterval, func() bool { return lostOf(t, r2)+lostOf(t, r3) == 3 }, func() string {
		return fmt.Sprintf("records counted lost: r2 %v + r3 %v, want 3 in all (offsets 3..5, deleted by retention before anyone read them; r2's commit of 8 landed, its answer lost)",
			lostOf(t, r2), lostOf(t, r3))
	})
	if err := r3.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// Adversary 51d: under kafka.reset_offset latest a replica that read past
// a reset, started what it read, and stopped without its commit landing
// leaves the gap to the next owner, which resets to the log end again and
// counts the whole range up to its first record as lost: records the first
// replica started are counted lost. Committed at 3, 3..7 produced, 3..5
// deleted by retention; r2 resets to 8 and starts i and j (8, 9), its
// commits refused; r3 resets to 10 and starts k. Lost: 3..7, five
// records; i and j were started (by r2), not lost.
func TestAResetToLatestDoesNotCountRecordsAnotherReplicaStartedAsLost(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 1, envOpt{})
	for _, id := range []string{"a", "b", "c"} {
		e.produce(0, id, "v")
	}
	cfg := e.config()
	cfg.ResetOffset = "latest"
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
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
	var refuse atomic.Bool // r2's commits are refused
	refuse.Store(true)
	e.cluster.ControlKey(kmsg.OffsetCommit.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		e.cluster.KeepControl()
		if !refuse.Load() {
			return nil, nil, false
		}
		r := req.(*kmsg.OffsetCommitRequest)
		resp := r.ResponseKind().(*kmsg.OffsetCommitResponse)
		for _, rt := range r.Topics {
			st := kmsg.NewOffsetCommitResponseTopic()
			st.Topic = rt.Topic
			st.TopicID = rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewOffsetCommitResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = kerr.CoordinatorLoadInProgress.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	var watchR3 atomic.Bool
	at8, at10 := make(chan struct{}), make(chan struct{})
	var at8Once, at10Once sync.Once
	e.cluster.ControlKey(kmsg.Fetch.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		e.cluster.KeepControl()
		for _, tp := range req.(*kmsg.FetchRequest).Topics {
			for _, p := range tp.Partitions {
				if p.FetchOffset == 8 {
					at8Once.Do(func() { close(at8) })
				}
				if p.FetchOffset == 10 && watchR3.Load() {
					at10Once.Do(func() { close(at10) })
				}
			}
		}
		return nil, nil, false
	})
	cfg.DrainTimeout = minDrainTimeout
	r2 := e.start("r2", cfg)
	select {
	case <-at8:
	case <-time.After(10 * time.Second):
		t.Fatal("r2 never fetched from 8 (the log end)")
	}
	e.produce(0, "i", "v") // offset 8
	e.produce(0, "j", "v") // offset 9
	for _, id := range []string{"i", "j"} {
		eventually(t, 10*time.Second, func() bool { return e.led.state(wid(id)) == stateStarted }, func() string { return id + " not started by r2" })
	}
	if err := r2.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if c := e.committed()[0]; c != 3 {
		t.Fatalf("the group's offset is %d after r2, the scenario wants 3 (r2's commits refused)", c)
	}
	refuse.Store(false)
	watchR3.Store(true)
	r3 := e.start("r3", cfg)
	select {
	case <-at10:
	case <-time.After(10 * time.Second):
		t.Fatal("r3 never fetched from 10 (the log end)")
	}
	if off := e.produce(0, "k", "v"); off != 10 {
		t.Fatalf("k at offset %d, the scenario wants 10", off)
	}
	eventually(t, 10*time.Second, func() bool { return e.starter.callCount(wid("k")) == 1 }, func() string { return "k not started by r3" })
	e.waitCommittedToEnd(10 * time.Second)
	for _, id := range []string{"i", "j"} {
		if n := e.starter.callCount(wid(id)); n != 1 {
			t.Errorf("%s: %d start calls, want 1 (by r2)", id, n)
		}
	}
	stays(t, 3*cfg.LagInterval, func() bool { return lostOf(t, r2)+lostOf(t, r3) == 5 }, func() string {
		return fmt.Sprintf("records counted lost: r2 %v + r3 %v, want 5 (offsets 3..7, skipped by the reset; i and j, 8 and 9, were started by r2)",
			lostOf(t, r2), lostOf(t, r3))
	})
	if err := r3.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// Adversary 51d (holds): a cooperative-sticky rebalance that moves one of
// two partitions, each with a retention gap still pending at r2 (the record
// after each gap held in Temporal), counts each gap once in all: the moved
// partition's gap is dropped at r2's revoke (its commit does not pass it)
// and counted by r3, which reads from the same offset and sees it again;
// the kept partition's is counted by r2 once its record finishes.
func TestACooperativeRebalanceCountsEachPendingRetentionGapOnce(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 2, envOpt{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var os kadm.Offsets
	dels := kadm.Offsets{}
	for p := int32(0); p < 2; p++ {
		for _, id := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} { // offsets 0..7
			e.produce(p, fmt.Sprintf("%s%d", id, p), "v")
		}
		os.AddOffset(testTopic, p, 3, -1)
		dels.AddOffset(testTopic, p, 6, -1)
	}
	resp, err := e.adm.CommitOffsets(ctx, e.group, os)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.adm.DeleteRecords(ctx, dels); err != nil {
		t.Fatal(err)
	}
	release0, release1 := e.starter.block(wid("g0")), e.starter.block(wid("g1"))
	defer release0()
	defer release1()
	r2 := e.start("r2", e.config())
	for _, id := range []string{"g0", "g1"} {
		eventually(t, 10*time.Second, func() bool { return e.starter.callCount(wid(id)) >= 1 }, func() string { return id + " not started by r2" })
	}
	r3 := e.start("r3", e.config())
	eventually(t, 10*time.Second, func() bool { return len(r2.owned()) == 1 && len(r3.owned()) == 1 }, func() string {
		return fmt.Sprintf("r2 owns %v, r3 %v: the rebalance did not move one partition", r2.owned(), r3.owned())
	})
	release0()
	release1()
	e.waitCommittedToEnd(10 * time.Second)
	stays(t, 3*e.config().LagInterval, func() bool { return lostOf(t, r2)+lostOf(t, r3) == 6 }, func() string {
		return fmt.Sprintf("records counted lost: r2 %v + r3 %v, want 6 (offsets 3..5 of each partition)", lostOf(t, r2), lostOf(t, r3))
	})
	if l2, l3 := lostOf(t, r2), lostOf(t, r3); l2 != 3 || l3 != 3 {
		t.Errorf("r2 counted %v, r3 %v: the scenario wants each to count its partition's gap (3 each)", l2, l3)
	}
	for _, rn := range []*runner{r2, r3} {
		if err := rn.stop(); err != nil {
			t.Fatalf("Run: %v", err)
		}
	}
}

// Adversary 51d: a retention gap that a stopped replica leaves pending is
// counted by the next owner only if that owner's read of the group's
// offset at assignment succeeds: when it fails (a coordinator slow past
// its 5 s, or an error), the next owner has no expected offset, sees no
// gap, and commits past it: the gap is counted by no one. Before e4a706e
// the first replica counted it when seen. Committed at 3, 3..7 produced,
// 3..5 deleted by retention; r2 starts g (6) and h (7), g held in
// Temporal past its drain; r3's offset read at assignment is refused once.
func TestARetentionGapLeftToTheNextOwnerIsCountedWhenItsOffsetReadAtAssignmentFails(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 1, envOpt{})
	for _, id := range []string{"a", "b", "c"} {
		e.produce(0, id, "v")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
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
	cfg := e.config()
	cfg.DrainTimeout = minDrainTimeout
	r2 := e.start("r2", cfg)
	eventually(t, 10*time.Second, func() bool { return e.starter.callCount(wid("g")) >= 1 }, func() string { return "g not started" })
	if err := r2.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if c := e.committed()[0]; c != 3 {
		t.Fatalf("the group's offset is %d after r2, the scenario wants 3 (g held)", c)
	}
	releaseG()
	// The next OffsetFetch that is not franz-go's own (RequireStable): r3's
	// read at assignment (its commits come CommitInterval later).
	var refused atomic.Int32
	e.cluster.ControlKey(kmsg.OffsetFetch.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		e.cluster.KeepControl()
		r := req.(*kmsg.OffsetFetchRequest)
		if r.RequireStable || refused.Load() > 0 {
			return nil, nil, false
		}
		refused.Add(1)
		resp := r.ResponseKind().(*kmsg.OffsetFetchResponse)
		resp.ErrorCode = kerr.GroupAuthorizationFailed.Code
		for _, g := range r.Groups {
			rg := kmsg.NewOffsetFetchResponseGroup()
			rg.Group = g.Group
			rg.ErrorCode = kerr.GroupAuthorizationFailed.Code
			resp.Groups = append(resp.Groups, rg)
		}
		return resp, nil, true
	})
	r3 := e.start("r3", e.config())
	eventually(t, 10*time.Second, func() bool { return refused.Load() == 1 }, func() string { return "r3's offset read at assignment not refused" })
	r3.waitJoined()
	e.waitCommittedToEnd(10 * time.Second)
	stays(t, 3*e.config().LagInterval, func() bool { return lostOf(t, r2)+lostOf(t, r3) == 3 }, func() string {
		return fmt.Sprintf("records counted lost: r2 %v + r3 %v, want 3 (offsets 3..5, deleted by retention before anyone read them; r2 left the gap pending, r3's offset read at assignment failed once)",
			lostOf(t, r2), lostOf(t, r3))
	})
	if err := r3.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// Adversary 51d: against a broker whose fetches do not say the log start
// (Fetch v4), a gap goes to checkGap, one check at a time per partition: a
// second retention gap seen while the first's check is in flight is
// dropped, neither checked nor counted, and the group's offset passes it.
// Committed at 3, 3..7 produced, 3..5 deleted; the check of the gap 3..5 is
// slow; meanwhile 8..12 are produced and 8..10 deleted before the router
// fetches them. Lost: 3..5 and 8..10, six records.
func TestASecondRetentionGapSeenWhileTheFirstIsCheckedIsCounted(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 1, envOpt{})
	for _, id := range []string{"a", "b", "c"} {
		e.produce(0, id, "v")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
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
	checkHeld, fetchHeld := make(chan struct{}), make(chan struct{})
	releaseCheck, releaseFetch := make(chan struct{}), make(chan struct{})
	var checkOnce, fetchOnce, relCheckOnce, relFetchOnce sync.Once
	relCheck := func() { relCheckOnce.Do(func() { close(releaseCheck) }) }
	relFetch := func() { relFetchOnce.Do(func() { close(releaseFetch) }) }
	defer relCheck()
	defer relFetch()
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
	e.cluster.ControlKey(kmsg.Fetch.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		e.cluster.KeepControl()
		hold := false
		for _, tp := range req.(*kmsg.FetchRequest).Topics {
			for _, p := range tp.Partitions {
				hold = hold || p.FetchOffset == 8
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
	v := kversion.Stable()
	v.SetMaxKeyVersion(kmsg.Fetch.Int16(), 4)
	rn := e.startOpts("r2", e.config(), kgo.MaxVersions(v))
	for name, ch := range map[string]chan struct{}{"the first gap's check": checkHeld, "the fetch from 8": fetchHeld} {
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s never came", name)
		}
	}
	for _, id := range []string{"i", "j", "k", "l", "m"} { // offsets 8..12
		e.produce(0, id, "v")
	}
	if _, err := e.adm.DeleteRecords(ctx, kadm.Offsets{testTopic: {0: {Topic: testTopic, Partition: 0, At: 11}}}); err != nil {
		t.Fatal(err)
	}
	relFetch()
	e.waitCommittedToEnd(10 * time.Second)
	relCheck()
	eventually(t, 10*time.Second, func() bool { return lostOf(t, rn) >= 3 }, func() string { return "the first gap's check never counted" })
	stays(t, 3*e.config().LagInterval, func() bool { return lostOf(t, rn) == 6 }, func() string {
		return fmt.Sprintf("%v records counted lost, want 6 (offsets 3..5 and 8..10, deleted by retention before they were read)", lostOf(t, rn))
	})
	if err := rn.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// Adversary 51d (holds): the error log of a counted gap names the right
// offsets: under earliest those retention deleted (3..5, 3 records); under
// latest the whole skipped range (3..7, 5 records) and where retention's
// part of it ends (deleted_to 5). Committed at 3, 3..7 produced, 3..5
// deleted; i produced once the router fetches from the reset point.
func TestAGapsErrorLogNamesTheSkippedOffsetsUnderEarliestAndLatest(t *testing.T) {
	for _, tc := range []struct {
		reset string
		at    int64 // where the reset lands
		want  map[string]string
	}{
		{"earliest", 6, map[string]string{"from": "3", "to": "5", "records": "3"}},
		{"latest", 8, map[string]string{"from": "3", "to": "7", "deleted_to": "5", "records": "5"}},
	} {
		t.Run(tc.reset, func(t *testing.T) {
			e := newTestEnv(t, 1, envOpt{})
			for _, id := range []string{"a", "b", "c"} {
				e.produce(0, id, "v")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
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
			at := make(chan struct{})
			var atOnce sync.Once
			e.cluster.ControlKey(kmsg.Fetch.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
				e.cluster.KeepControl()
				for _, tp := range req.(*kmsg.FetchRequest).Topics {
					for _, p := range tp.Partitions {
						if p.FetchOffset == tc.at {
							atOnce.Do(func() { close(at) })
						}
					}
				}
				return nil, nil, false
			})
			var mu sync.Mutex
			var logs []map[string]string
			log := slog.New(logHook{on: func(r slog.Record) {
				if r.Level == slog.LevelError && strings.Contains(r.Message, "lost") {
					mu.Lock()
					logs = append(logs, logAttrs(r))
					mu.Unlock()
				}
			}})
			cfg := e.config()
			cfg.ResetOffset = tc.reset
			r, err := New(cfg, Options{Ledger: e.led, DeadLetterLog: e.dlq, Starter: e.starter.as("r2"), Log: log,
				KafkaOpts: []kgo.Opt{kgo.HeartbeatInterval(100 * time.Millisecond), kgo.MetadataMinAge(50 * time.Millisecond)}})
			if err != nil {
				t.Fatal(err)
			}
			rctx, rcancel := context.WithCancel(context.Background())
			rn := &runner{t: t, r: r, cancel: rcancel, done: make(chan error, 1)}
			go func() { rn.done <- r.Run(rctx) }()
			t.Cleanup(func() { _ = rn.stop() })
			select {
			case <-at:
			case <-time.After(10 * time.Second):
				t.Fatalf("the router never fetched from %d", tc.at)
			}
			e.produce(0, "i", "v")
			e.waitCommittedToEnd(10 * time.Second)
			logged := func() []map[string]string {
				mu.Lock()
				defer mu.Unlock()
				return append([]map[string]string(nil), logs...)
			}
			eventually(t, 5*time.Second, func() bool { return len(logged()) > 0 }, func() string { return "no error log of lost records" })
			if err := rn.stop(); err != nil {
				t.Fatalf("Run: %v", err)
			}
			got := logged()
			if len(got) != 1 {
				t.Fatalf("%d error logs of lost records, want 1: %v", len(got), got)
			}
			for k, v := range tc.want {
				if got[0][k] != v {
					t.Errorf("the log's %s is %q, want %q (log: %v)", k, got[0][k], v, got[0])
				}
			}
		})
	}
}

// Adversary 51d (holds): a retention gap whose next record is dead-lettered
// (it cannot be decoded) is counted: the dead-lettered record finishes, the
// commit passes the gap. Committed at 3, 3..7 produced (6 undecodable), 3..5
// deleted.
func TestARetentionGapBeforeADeadLetteredRecordIsCounted(t *testing.T) {
	e := newTestEnv(t, 1, envOpt{})
	for _, id := range []string{"a", "b", "c"} {
		e.produce(0, id, "v")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
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
	for _, id := range []string{"d", "e", "f"} { // offsets 3..5
		e.produce(0, id, "v")
	}
	if off := e.produceRaw(0, []byte("not an event")); off != 6 {
		t.Fatalf("the undecodable record at %d, the scenario wants 6", off)
	}
	e.produce(0, "h", "v") // offset 7
	if _, err := e.adm.DeleteRecords(ctx, kadm.Offsets{testTopic: {0: {Topic: testTopic, Partition: 0, At: 6}}}); err != nil {
		t.Fatal(err)
	}
	rn := e.start("r2", e.config())
	e.waitCommittedToEnd(10 * time.Second)
	if n := len(e.dlqRecords()); n != 1 {
		t.Fatalf("%d records dead-lettered, the scenario wants 1 (offset 6)", n)
	}
	stays(t, 3*e.config().LagInterval, func() bool { return lostOf(t, rn) == 3 }, func() string {
		return fmt.Sprintf("%v records counted lost, want 3 (offsets 3..5)", lostOf(t, rn))
	})
	if err := rn.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// Adversary 51d (holds): a partition lost (the coordinator no longer knows
// the member) with a retention gap pending, and assigned back to the same
// router, is read again from the group's offset: the gap is seen again by
// the new assignment and counted once. Committed at 3, 3..7 produced,
// 3..5 deleted; g (6) held in Temporal while the partition is lost.
func TestAPartitionLostAndAssignedBackCountsItsPendingRetentionGapOnce(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 1, envOpt{})
	for _, id := range []string{"a", "b", "c"} {
		e.produce(0, id, "v")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
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
	rn := e.start("r2", e.config())
	eventually(t, 10*time.Second, func() bool { return e.starter.callCount(wid("g")) >= 1 }, func() string { return "g not started" })
	lostBefore := func() float64 {
		var m dto.Metric
		if err := rn.r.m.partitionsGone.WithLabelValues("lost").Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetCounter().GetValue()
	}
	armed.Store(true)
	eventually(t, 10*time.Second, func() bool { return lostBefore() >= 1 }, func() string { return "the partition was not lost" })
	eventually(t, 10*time.Second, func() bool { return len(rn.owned()) == 1 }, func() string { return "the partition was not assigned back" })
	releaseG()
	e.waitCommittedToEnd(10 * time.Second)
	stays(t, 3*e.config().LagInterval, func() bool { return lostOf(t, rn) == 3 }, func() string {
		return fmt.Sprintf("%v records counted lost, want 3 (offsets 3..5, once)", lostOf(t, rn))
	})
	if err := rn.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
}
