package processor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kprom"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/dedupio/dedup/connect/tracing"
	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/schemas"
)

// One execution per workflow ID, every ledger row started, every offset
// committed, nothing dead-lettered: duplicates in one poll batch (same and
// other partition) and in later batches (once started) are skipped.
func TestHappyPathDuplicatesOneExecutionEach(t *testing.T) {
	e := newTestEnv(t, 2, envOpt{})
	const n = 30
	id := func(i int) string { return fmt.Sprintf("e%02d", i) }
	// First batch: every event on its partition, a copy on the other
	// partition, and every third one twice on its own partition.
	for i := 0; i < n; i++ {
		p := int32(i % 2)
		e.produce(p, id(i), "v")
		e.produce(1-p, id(i), "v")
		if i%3 == 0 {
			e.produce(p, id(i), "v")
		}
	}
	rn := e.start("r1", e.config())
	e.waitCommittedToEnd(10 * time.Second)
	// Later batches: every event again (now started: duplicates), and new
	// ones with their own copies.
	for i := 0; i < n+10; i++ {
		e.produce(int32(i%2), id(i), "v")
		if i >= n {
			e.produce(int32(1-i%2), id(i), "v")
		}
	}
	e.waitCommittedToEnd(10 * time.Second)
	if err := rn.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	for i := 0; i < n+10; i++ {
		if ex := e.starter.executionsOf(wid(id(i))); len(ex) != 1 {
			t.Errorf("%s: %d executions, want 1", id(i), len(ex))
		}
		if st := e.led.state(wid(id(i))); st != stateStarted {
			t.Errorf("%s: ledger state %q, want started", id(i), st)
		}
	}
	if got := len(e.starter.executionCounts()); got != n+10 {
		t.Errorf("%d workflows started, want %d", got, n+10)
	}
	if dl := e.dlq.recorded(); len(dl) != 0 {
		t.Errorf("dead letters: %+v", dl)
	}
	if !e.atEnd() {
		t.Errorf("after Run: committed %v, ends %v", e.committed(), e.ends())
	}
}

// A row pending with payload A (a previous run claimed it and crashed
// before starting) and a copy B of the same event ID with another payload:
// whatever the order B and A are polled in, the workflow starts once, with
// A; B is dead-lettered as a conflict; both offsets are committed.
func TestConflictingCopyBeforeOriginal(t *testing.T) {
	check := func(t *testing.T, e *testEnv, offB int64, pB int32) {
		t.Helper()
		ex := e.starter.executionsOf(wid("e1"))
		if len(ex) != 1 {
			t.Fatalf("%d executions, want 1", len(ex))
		}
		if got := string(ex[0].req.Input.Data); got != string(value("e1", "A")) {
			t.Errorf("started with data %s, want A's", got)
		}
		if st := e.led.state(wid("e1")); st != stateStarted {
			t.Errorf("ledger state %q, want started", st)
		}
		dl := e.dlq.recorded()
		if len(dl) != 1 || dl[0].Reason != string(decide.ReasonConflict) || dl[0].Partition != pB || dl[0].Offset != offB {
			t.Errorf("dead letters %+v, want B (partition %d offset %d) as conflict", dl, pB, offB)
		}
		if got := e.dlqReasons(); len(got) != 1 || got[string(decide.ReasonConflict)] != 1 {
			t.Errorf("dead-letter topic holds %v, want one conflict", got)
		}
	}
	// bFirst reports whether one claim held B before A.
	bFirst := func(e *testEnv, hashB [32]byte) bool {
		for _, c := range e.led.claimLog() {
			for _, in := range c {
				if in.WorkflowID == wid("e1") {
					if in.PayloadHash == hashB {
						return len(c) > 1
					}
					break
				}
			}
		}
		return false
	}
	t.Run("same batch", func(t *testing.T) {
		// B on one partition, A on the other, produced before the router
		// runs: one poll. Which partition the client returns first is up
		// to it, so both placements are tried, and B is polled first in
		// at least one of them; a third case puts B before A on one
		// partition, where the order is certain.
		sawBFirst := false
		for _, c := range []struct {
			name   string
			pB, pA int32
		}{{"B on 1, A on 0", 1, 0}, {"B on 0, A on 1", 0, 1}, {"B then A on 0", 0, 0}} {
			t.Run(c.name, func(t *testing.T) {
				e := newTestEnv(t, 2, envOpt{})
				hashA, hashB := e.hashOf("e1", "A"), e.hashOf("e1", "B")
				e.led.seed(wid("e1"), statePending, hashA)
				offB := e.produce(c.pB, "e1", "B")
				e.produce(c.pA, "e1", "A")
				rn := e.start("r1", e.config())
				e.waitCommittedToEnd(10 * time.Second)
				if err := rn.stop(); err != nil {
					t.Fatalf("Run: %v", err)
				}
				check(t, e, offB, c.pB)
				if bFirst(e, hashB) {
					sawBFirst = true
				}
			})
		}
		if !sawBFirst {
			t.Errorf("no case claimed B before A in one batch: the test did not test the ordering")
		}
	})
	t.Run("across batches", func(t *testing.T) {
		e := newTestEnv(t, 2, envOpt{})
		e.led.seed(wid("e1"), statePending, e.hashOf("e1", "A"))
		rn := e.start("r1", e.config())
		offB := e.produce(1, "e1", "B")
		e.waitCommittedToEnd(10 * time.Second)
		if n := len(e.starter.executionsOf(wid("e1"))); n != 0 {
			t.Fatalf("B started %d workflows", n)
		}
		e.produce(0, "e1", "A")
		e.waitCommittedToEnd(10 * time.Second)
		if err := rn.stop(); err != nil {
			t.Fatalf("Run: %v", err)
		}
		check(t, e, offB, 1)
	})
}

// Two records whose starts hang; a second router joins the group, and the
// first one gives it one partition (cooperative-sticky: which one is the
// balancer's choice, so both are blocked and the test follows the one that
// moved). The moved record is not committed by the first router (its start
// was still in flight past RevokeTimeout); the second router starts it;
// one execution each.
func TestRevokeWhileStartInFlight(t *testing.T) {
	e := newTestEnv(t, 2, envOpt{})
	releaseX, releaseY := e.starter.block(wid("x")), e.starter.block(wid("y"))
	defer releaseX()
	defer releaseY()
	offs := map[string]int64{"x": e.produce(0, "x", "v"), "y": e.produce(1, "y", "v")}
	parts := map[string]int32{"x": 0, "y": 1}
	r1 := e.start("r1", e.config())
	eventually(t, 10*time.Second, func() bool {
		return e.starter.heldCount(wid("x")) == 1 && e.starter.heldCount(wid("y")) == 1
	}, func() string { return "starts of x and y not in flight" })

	r2 := e.start("r2", e.config())
	var moved, kept string
	eventually(t, 15*time.Second, func() bool {
		for _, id := range []string{"x", "y"} {
			for _, by := range e.starter.callersOf(wid(id)) {
				if by == "r2" {
					moved = id
				}
			}
		}
		return moved != ""
	}, func() string { return "the second router never started a moved record" })
	kept = map[string]string{"x": "y", "y": "x"}[moved]
	// The first router's start of the moved record was abandoned (its
	// partition context ended); the second router's is the one held now.
	eventually(t, 5*time.Second, func() bool { return e.starter.heldCount(wid(moved)) == 1 },
		func() string { return fmt.Sprintf("%d starts of %s held", e.starter.heldCount(wid(moved)), moved) })
	if c := e.committed()[parts[moved]]; c > offs[moved] {
		t.Fatalf("moved record %s committed (%d) before any router started it", moved, c)
	}
	map[string]func(){"x": releaseX, "y": releaseY}[moved]()
	eventually(t, 10*time.Second, func() bool { return e.committed()[parts[moved]] == offs[moved]+1 },
		func() string { return fmt.Sprintf("committed %v", e.committed()) })
	if c := e.committed()[parts[kept]]; c > offs[kept] {
		t.Fatalf("kept record %s committed (%d) while its start is held", kept, c)
	}
	map[string]func(){"x": releaseX, "y": releaseY}[kept]()
	e.waitCommittedToEnd(10 * time.Second)
	for _, rn := range []*runner{r2, r1} {
		if err := rn.stop(); err != nil {
			t.Fatalf("Run: %v", err)
		}
	}
	for id, by := range map[string]string{moved: "r2", kept: "r1"} {
		ex := e.starter.executionsOf(wid(id))
		if len(ex) != 1 || ex[0].by != by {
			t.Errorf("%s: executions %+v, want one by %s", id, ex, by)
		}
		if st := e.led.state(wid(id)); st != stateStarted {
			t.Errorf("%s: ledger state %q", id, st)
		}
	}
}

// A lost partition (the committer's lost callback, called directly: kfake
// does not make a member lose partitions on demand) commits nothing
// afterwards, neither the record whose start was in flight nor later ones;
// the other partition goes on.
func TestLostPartitionCommitsNothing(t *testing.T) {
	e := newTestEnv(t, 2, envOpt{})
	release := e.starter.block(wid("x"))
	defer release()
	e.produce(0, "x", "v")
	e.produce(1, "y", "v")
	rn := e.start("r1", e.config())
	eventually(t, 10*time.Second, func() bool {
		return e.starter.heldCount(wid("x")) == 1 && e.committed()[1] == 1
	}, func() string {
		return fmt.Sprintf("x held %d, committed %v", e.starter.heldCount(wid("x")), e.committed())
	})

	rn.r.commits.lost(t.Context(), nil, map[string][]int32{testTopic: {0}})
	// The start in flight is abandoned with the partition.
	eventually(t, 5*time.Second, func() bool { return e.starter.heldCount(wid("x")) == 0 },
		func() string { return "x's start still held after the loss" })
	release()
	e.produce(0, "z", "v")
	e.produce(1, "w", "v")
	eventually(t, 10*time.Second, func() bool { return e.committed()[1] == 2 },
		func() string { return fmt.Sprintf("committed %v", e.committed()) })
	stays(t, 300*time.Millisecond, func() bool { return e.committed()[0] == -1 },
		func() string { return fmt.Sprintf("lost partition committed: %v", e.committed()) })
	if err := rn.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if c := e.committed()[0]; c != -1 {
		t.Errorf("lost partition committed to %d by the final commit", c)
	}
	if n := len(e.starter.executionsOf(wid("x"))); n != 0 {
		t.Errorf("x: %d executions after its start was abandoned", n)
	}
}

// The owner copy of a workflow (partition 0) hangs in the starter; a later
// copy on partition 1 waits on it. Partition 0 is revoked (the committer's
// revoked callback, called directly, because cooperative-sticky picks which
// partition moves): the waiter takes the start over, partition 1 commits,
// one execution; partition 0 is not committed.
func TestWaiterTakesOverWhenOwnerRevoked(t *testing.T) {
	e := newTestEnv(t, 2, envOpt{})
	w := wid("x")
	release := e.starter.block(w)
	defer release()
	e.produce(0, "x", "v")
	rn := e.start("r1", e.config())
	eventually(t, 10*time.Second, func() bool { return e.starter.heldCount(w) == 1 },
		func() string { return "owner's start not in flight" })
	e.produce(1, "x", "v")
	eventually(t, 10*time.Second, func() bool { return waitersOf(rn.r, w) == 1 },
		func() string { return fmt.Sprintf("waiters %d", waitersOf(rn.r, w)) })

	// revoked waits RevokeTimeout for the owner, commits nothing for
	// partition 0, and forgets it: the owner's start is abandoned.
	rn.r.commits.revoked(t.Context(), nil, map[string][]int32{testTopic: {0}})
	eventually(t, 5*time.Second, func() bool { return e.starter.callCount(w) == 2 && e.starter.heldCount(w) == 1 },
		func() string {
			return fmt.Sprintf("calls %d held %d: the waiter did not take over", e.starter.callCount(w), e.starter.heldCount(w))
		})
	release()
	eventually(t, 10*time.Second, func() bool { return e.committed()[1] == 1 },
		func() string { return fmt.Sprintf("committed %v", e.committed()) })
	if err := rn.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if n := len(e.starter.executionsOf(w)); n != 1 {
		t.Errorf("%d executions, want 1", n)
	}
	if st := e.led.state(w); st != stateStarted {
		t.Errorf("ledger state %q, want started", st)
	}
	if c := e.committed()[0]; c != -1 {
		t.Errorf("revoked partition committed to %d", c)
	}
}

// A copy claimed while another copy's start of its workflow was in flight
// here, whose turn in the claimer comes only after that start was marked
// and left the start pool (a claimer descheduled), is a duplicate of it:
// Temporal is asked once. The two copies in one claim (the ledger answers
// both "new"), or the second in a later claim that read the row pending
// ("redrive"); a start route and a signal route alike.
func TestACopyClaimedWhileTheStartWasInFlightIsADuplicateOnceThatStartIsMarked(t *testing.T) {
	for _, sameClaim := range []bool{false, true} {
		name := "a later claim"
		if sameClaim {
			name = "the same claim"
		}
		// One claim: both copies on one partition, so that one poll has
		// both (two partitions' records may come in two polls).
		parts := map[bool]int32{false: 2, true: 1}[sameClaim]
		t.Run("start route, "+name, func(t *testing.T) {
			e := newTestEnv(t, parts, envOpt{})
			testCopyAfterTheMark(t, e, e.config(), wid("x"), value("x", "v"), sameClaim)
		})
		t.Run("signal route, "+name, func(t *testing.T) {
			e := newTestEnv(t, parts, envOpt{})
			testCopyAfterTheMark(t, e, e.signalConfig(""), decide.DeliveryKey("orders", "e1"), orderEvent("e1", "o1", "v"), sameClaim)
		})
	}
}

// testCopyAfterTheMark: raw's first copy (partition 0, offset 0) is held
// in the starter. The second (offset 1 of partition 0 when sameClaim, in
// the same poll and claim; else partition 1, in a later claim) has its
// turn in the claimer only once the first is started, marked and out of
// the start pool: the claimer is held, in the same claim at the first
// copy's decision log line, in a later one between the ledger's answer
// and the dispatch (hooks.AfterClaim).
func testCopyAfterTheMark(t *testing.T, e *testEnv, cfg Config, w string, raw []byte, sameClaim bool) {
	release := e.starter.block(w)
	defer release()
	var rn *runner
	held := false
	// hold releases the first copy's start and waits until it has left
	// the start pool (on the claimer's goroutine).
	hold := func() {
		held = true
		release()
		eventually(t, 10*time.Second, func() bool { return waitersOf(rn.r, w) == -1 },
			func() string { return "the first copy's start is still in the start pool" })
	}
	e.produceRaw(0, raw)
	if sameClaim {
		e.produceRaw(0, raw)
		rn = e.startWith("r1", cfg, func(r *Router, _ *prometheus.Registry) {
			r.claims.log = slog.New(logHook{func(rec slog.Record) {
				if at := logAttrs(rec); rec.Message == "decision" && at["decision"] == "new" && at["offset"] == "0" && at["workflow_id"] == w {
					hold()
				}
			}})
		})
	} else {
		rn = e.startWith("r1", cfg, func(r *Router, _ *prometheus.Registry) {
			r.claims.hooks.AfterClaim = func() {
				claims := e.led.claimLog()
				if last := claims[len(claims)-1]; len(last) != 1 || last[0].Partition != 1 {
					return
				}
				if st := e.led.state(w); st != statePending {
					t.Errorf("the second copy's claim read %q, want pending", st)
				}
				hold()
			}
		})
		eventually(t, 10*time.Second, func() bool { return e.starter.heldCount(w) == 1 },
			func() string { return "the first copy's start not in flight" })
		e.produceRaw(1, raw)
	}
	e.waitCommittedToEnd(10 * time.Second)
	if err := rn.stop(); err != nil {
		t.Fatal(err)
	}
	if !held {
		t.Fatal("the claimer was never held: the case did not happen")
	}
	if sameClaim {
		if claims := e.led.claimLog(); len(claims) != 1 || len(claims[0]) != 2 {
			t.Fatalf("claims %v, want one of both copies", claims)
		}
	}
	if c := e.starter.callCount(w); c != 1 {
		t.Errorf("Temporal asked %d times for %s, want once", c, w)
	}
	if st := e.led.state(w); st != stateStarted {
		t.Errorf("ledger state %q, want started", st)
	}
}

// logHook is a slog handler that hands every record, at every level, to
// its func.
type logHook struct{ on func(slog.Record) }

func (h logHook) Enabled(context.Context, slog.Level) bool { return true }
func (h logHook) Handle(_ context.Context, r slog.Record) error {
	h.on(r)
	return nil
}
func (h logHook) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h logHook) WithGroup(string) slog.Handler      { return h }

// logAttrs is rec's attributes as strings.
func logAttrs(rec slog.Record) map[string]string {
	at := map[string]string{}
	rec.Attrs(func(a slog.Attr) bool {
		at[a.Key] = a.Value.String()
		return true
	})
	return at
}

// Temporal refuses a start for good while another copy waits on it: both
// records finish, one dead letter temporal_permanent (the owner's), the
// ledger row ends dead_lettered, both offsets are committed.
func TestPermanentStartErrorWithWaiter(t *testing.T) {
	e := newTestEnv(t, 2, envOpt{})
	w := wid("x")
	release := e.starter.block(w)
	defer release()
	offOwner := e.produce(0, "x", "v")
	rn := e.start("r1", e.config())
	eventually(t, 10*time.Second, func() bool { return e.starter.heldCount(w) == 1 },
		func() string { return "owner's start not in flight" })
	e.produce(1, "x", "v")
	eventually(t, 10*time.Second, func() bool { return waitersOf(rn.r, w) == 1 },
		func() string { return fmt.Sprintf("waiters %d", waitersOf(rn.r, w)) })
	e.starter.failPermanent(w)
	release()
	e.waitCommittedToEnd(10 * time.Second)
	if err := rn.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	dl := e.dlq.recorded()
	if len(dl) != 1 || dl[0].Reason != string(decide.ReasonTemporalPermanent) || dl[0].Partition != 0 || dl[0].Offset != offOwner || dl[0].WorkflowID != w {
		t.Errorf("dead letters %+v, want the owner's, temporal_permanent", dl)
	}
	if got := e.dlqReasons(); len(got) != 1 || got[string(decide.ReasonTemporalPermanent)] != 1 {
		t.Errorf("dead-letter topic holds %v, want one temporal_permanent", got)
	}
	if st := e.led.state(w); st != stateDeadLettered {
		t.Errorf("ledger state %q, want dead_lettered", st)
	}
	if n := len(e.starter.executionsOf(w)); n != 0 {
		t.Errorf("%d executions", n)
	}
	if c := e.starter.callCount(w); c != 1 {
		t.Errorf("Temporal asked %d times, want once", c)
	}
}

// A dead letter that cannot be written holds its record (and the records
// after it on its partition) uncommitted; once the write goes through, the
// partition commits and the record is dead-lettered once.
func TestDeadLetterWriteFailureHoldsTheOffset(t *testing.T) {
	for _, c := range []struct {
		name string
		fail func(*fakeDeadLetterLog, int, error)
		// calls is the log call that must have been retried a few times.
		calls string
	}{
		{"dead-letter log Written fails", (*fakeDeadLetterLog).failAll, "Written"},
		// The dead letter is produced, then its log entry fails: Record is
		// retried alone, and the topic gets it once.
		{"dead-letter log Record fails", (*fakeDeadLetterLog).failRecord, "Record"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newTestEnv(t, 2, envOpt{})
			c.fail(e.dlq, -1, errTransient)
			e.produceRaw(0, []byte("not json"))
			e.produce(0, "x", "v")
			// Partition 1 is not asserted on while the write fails: the
			// dead letters of a poll batch are written in the poll loop,
			// so the whole batch (and polling) waits for them; with the
			// dependency down, fetching is paused anyway (health).
			e.produce(1, "y", "v")
			rn := e.start("r1", e.config())
			eventually(t, 10*time.Second, func() bool { return e.dlq.callCount(c.calls) >= 5 },
				func() string { return fmt.Sprintf("%s called %d times", c.calls, e.dlq.callCount(c.calls)) })
			stays(t, 200*time.Millisecond, func() bool { return e.committed()[0] == -1 },
				func() string { return fmt.Sprintf("committed %v while the dead letter is not written", e.committed()) })
			c.fail(e.dlq, 0, nil)
			e.waitCommittedToEnd(10 * time.Second)
			if err := rn.stop(); err != nil {
				t.Fatalf("Run: %v", err)
			}
			if got := e.dlq.byReason(); len(got) != 1 || got[string(decide.ReasonUndecodable)] != 1 {
				t.Errorf("dead-letter log holds %v, want one undecodable", got)
			}
			if got := e.dlqReasons(); len(got) != 1 || got[string(decide.ReasonUndecodable)] != 1 {
				t.Errorf("dead-letter topic holds %v, want one undecodable", got)
			}
			for _, id := range []string{"x", "y"} {
				if n := len(e.starter.executionsOf(wid(id))); n != 1 {
					t.Errorf("%s: %d executions", id, n)
				}
			}
		})
	}
	// The router stops while the write still fails: nothing is committed
	// (a record ended as done although its dead letter was never written
	// would be committed by the final commit).
	for _, c := range []struct {
		name string
		fail func(*fakeDeadLetterLog, int, error)
		call string
	}{
		{"stopped while Written fails", (*fakeDeadLetterLog).failAll, "Written"},
		{"stopped while Record fails", (*fakeDeadLetterLog).failRecord, "Record"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newTestEnv(t, 1, envOpt{})
			c.fail(e.dlq, -1, errTransient)
			e.produceRaw(0, []byte("not json"))
			e.produce(0, "x", "v")
			rn := e.start("r1", e.config())
			eventually(t, 10*time.Second, func() bool { return e.dlq.callCount(c.call) >= 3 },
				func() string { return fmt.Sprintf("%s called %d times", c.call, e.dlq.callCount(c.call)) })
			if err := rn.stop(); err != nil {
				t.Fatalf("Run: %v", err)
			}
			if got := e.committed()[0]; got != -1 {
				t.Fatalf("committed %d although the dead letter was never logged", got)
			}
			if n := len(e.dlq.recorded()); n != 0 {
				t.Fatalf("%d dead letters logged while the log failed", n)
			}
		})
	}
	t.Run("dead-letter topic missing", func(t *testing.T) {
		// Auto-creation is off (kfake's default): producing to the
		// dead-letter topic fails until it is created.
		e := newTestEnv(t, 1, envOpt{noDLQTopic: true})
		e.produceRaw(0, []byte("not json"))
		e.produce(0, "x", "v")
		rn := e.start("r1", e.config())
		rn.waitJoined()
		stays(t, 500*time.Millisecond, func() bool { return e.committed()[0] == -1 },
			func() string { return fmt.Sprintf("committed %v with no dead-letter topic", e.committed()) })
		if n := len(e.dlq.recorded()); n != 0 {
			t.Fatalf("%d dead letters recorded with no dead-letter topic", n)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		if _, err := e.adm.CreateTopic(ctx, 1, 1, nil, testTopic+".dlq"); err != nil {
			t.Fatal(err)
		}
		e.waitCommittedToEnd(15 * time.Second)
		if err := rn.stop(); err != nil {
			t.Fatalf("Run: %v", err)
		}
		if got := e.dlq.byReason(); len(got) != 1 || got[string(decide.ReasonUndecodable)] != 1 {
			t.Errorf("dead-letter log holds %v, want one undecodable", got)
		}
		if got := e.dlqReasons(); len(got) != 1 || got[string(decide.ReasonUndecodable)] != 1 {
			t.Errorf("dead-letter topic holds %v, want one undecodable", got)
		}
	})
}

// Shutdown with a start hanging past DrainTimeout: Run returns within about
// DrainTimeout; the records before the hanging one are committed, it and
// the records after it are not; nothing is left running (checked here with
// the cluster closed, and again by TestMain).
func TestDrainTimeoutLeavesTheHungRecordUncommitted(t *testing.T) {
	e := newTestEnv(t, 1, envOpt{})
	release := e.starter.block(wid("b"))
	defer release()
	e.produce(0, "a", "v")
	e.produce(0, "b", "v")
	e.produce(0, "c", "v")
	cfg := e.config()
	cfg.DrainTimeout = minDrainTimeout
	rn := e.start("r1", cfg)
	eventually(t, 10*time.Second, func() bool {
		return e.committed()[0] == 1 && e.starter.heldCount(wid("b")) == 1 && e.led.state(wid("c")) == stateStarted
	}, func() string {
		return fmt.Sprintf("committed %v, b held %d", e.committed(), e.starter.heldCount(wid("b")))
	})
	if err := rn.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	// The drain waits DrainTimeout less the final mark's, commit's and
	// leave's share (shutdownReserve): the whole shutdown fits in
	// DrainTimeout.
	if d := cfg.DrainTimeout - shutdownReserve(cfg.DrainTimeout); rn.took < d || rn.took > cfg.DrainTimeout+5*time.Second {
		t.Errorf("Run returned %s after cancel, want the drain's share (%s) of DrainTimeout (%s) and the leave", rn.took, d, cfg.DrainTimeout)
	}
	if c := e.committed()[0]; c != 1 {
		t.Errorf("committed %d, want 1 (a only)", c)
	}
	if n := len(e.starter.executionsOf(wid("b"))); n != 0 {
		t.Errorf("b: %d executions after its start was abandoned", n)
	}
	if st := e.led.state(wid("b")); st != statePending {
		t.Errorf("b: ledger state %q, want pending (re-driven on redelivery)", st)
	}
	e.close()
	goleak.VerifyNone(t)
}

// A claim that fails transiently pauses fetching (Ready names postgres)
// and the router resumes when PostgreSQL answers; a permanent claim error
// stops the router: Run returns it, nothing is committed.
func TestClaimErrors(t *testing.T) {
	t.Run("transient", func(t *testing.T) {
		e := newTestEnv(t, 2, envOpt{})
		e.led.failClaims(-1, errTransient)
		rn := e.start("r1", e.config())
		rn.waitJoined()
		e.produce(0, "x", "v")
		eventually(t, 10*time.Second, func() bool {
			err := rn.r.Ready()
			return err != nil && strings.Contains(err.Error(), "postgres") && rn.r.health.Paused()
		}, func() string { return fmt.Sprintf("Ready: %v", rn.r.Ready()) })
		if c := e.committed()[0]; c != -1 {
			t.Fatalf("committed %d while the claim fails", c)
		}
		e.led.failClaims(0, nil)
		eventually(t, 10*time.Second, func() bool { return rn.r.Ready() == nil && !rn.r.health.Paused() },
			func() string { return fmt.Sprintf("Ready: %v", rn.r.Ready()) })
		e.produce(1, "y", "v") // fetched after the resume
		e.waitCommittedToEnd(10 * time.Second)
		if err := rn.stop(); err != nil {
			t.Fatalf("Run: %v", err)
		}
		for _, id := range []string{"x", "y"} {
			if n := len(e.starter.executionsOf(wid(id))); n != 1 {
				t.Errorf("%s: %d executions", id, n)
			}
		}
	})
	t.Run("permanent", func(t *testing.T) {
		e := newTestEnv(t, 2, envOpt{})
		denied := errors.New("permission denied for table dedup_ledger")
		e.led.failClaims(-1, Permanent(denied))
		rn := e.start("r1", e.config())
		e.produce(0, "x", "v")
		var err error
		select {
		case err = <-rn.done:
		case <-time.After(15 * time.Second):
			t.Fatal("Run did not return after a permanent claim error")
		}
		rn.once.Do(func() {}) // already returned: cleanup must not wait again
		if !errors.Is(err, denied) {
			t.Fatalf("Run returned %v, want the permanent error", err)
		}
		if c := e.committed()[0]; c != -1 {
			t.Errorf("committed %d after a failed claim", c)
		}
		if n := len(e.starter.executionCounts()); n != 0 {
			t.Errorf("%d workflows started", n)
		}
	})
}

// A start that succeeded but is still waiting in the marker's batch when
// shutdown's drain deadline passes is marked by the marker's final flush
// (with a deadline of its own, not the cancelled work context), and its
// record is committed by the final commit.
func TestShutdownMarksAndCommitsWhatStarted(t *testing.T) {
	e := newTestEnv(t, 1, envOpt{})
	e.produce(0, "a", "v")
	cfg := e.config()
	cfg.Starts.MarkInterval = time.Minute // the batch waits for the final flush
	cfg.RevokeTimeout = 2 * time.Minute   // above mark_interval (Validate); nothing is revoked
	cfg.DrainTimeout = minDrainTimeout
	rn := e.start("r1", cfg)
	eventually(t, 10*time.Second, func() bool { return len(e.starter.executionsOf(wid("a"))) == 1 },
		func() string { return "a not started" })
	if st := e.led.state(wid("a")); st != statePending {
		t.Fatalf("a: ledger %q before shutdown, want pending (not marked yet)", st)
	}
	if err := rn.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if st := e.led.state(wid("a")); st != stateStarted {
		t.Errorf("a: ledger %q after shutdown, want started (the final flush)", st)
	}
	if c := e.committed()[0]; c != 1 {
		t.Errorf("committed %d, want 1", c)
	}
}

// Temporal refuses a start for good; the dead letter is written,
// but MarkDeadLettered keeps failing, and the router stops (or the
// partition is revoked) before it lands. The record must not be committed:
// its row is still pending, and only a redelivery can end it. The next
// router re-drives it: the dead letter is not written again, the row ends
// dead_lettered, and then the offset is committed.
func TestPermanentStartErrorCommitsOnlyOnceTheRowIsDeadLettered(t *testing.T) {
	for _, how := range []string{"shutdown", "revoke"} {
		t.Run(how, func(t *testing.T) {
			e := newTestEnv(t, 1, envOpt{})
			w := wid("x")
			e.starter.failPermanent(w)
			e.led.failMarkDeadLettered(-1, errTransient)
			e.produce(0, "x", "v")
			rn := e.start("r1", e.config())
			eventually(t, 10*time.Second, func() bool {
				return len(e.dlq.recorded()) == 1 && e.led.callCount("MarkDeadLettered") >= 3
			}, func() string {
				return fmt.Sprintf("dead letters %d, MarkDeadLettered calls %d", len(e.dlq.recorded()), e.led.callCount("MarkDeadLettered"))
			})
			stays(t, 200*time.Millisecond, func() bool { return e.committed()[0] == -1 },
				func() string { return fmt.Sprintf("committed %v while the row is pending", e.committed()) })
			if how == "revoke" {
				rn.r.commits.revoked(t.Context(), nil, map[string][]int32{testTopic: {0}})
			}
			if err := rn.stop(); err != nil {
				t.Fatalf("Run: %v", err)
			}
			if st := e.led.state(w); st != statePending {
				t.Fatalf("row %q, want pending (MarkDeadLettered never landed)", st)
			}
			if c := e.committed()[0]; c != -1 {
				t.Fatalf("committed %d past a record whose row is pending with no owner", c)
			}

			e.led.failMarkDeadLettered(0, nil)
			rn = e.start("r2", e.config())
			e.waitCommittedToEnd(10 * time.Second)
			if err := rn.stop(); err != nil {
				t.Fatalf("Run: %v", err)
			}
			if st := e.led.state(w); st != stateDeadLettered {
				t.Errorf("row %q after the redelivery, want dead_lettered", st)
			}
			if got := e.dlqReasons(); len(got) != 1 || got[string(decide.ReasonTemporalPermanent)] != 1 {
				t.Errorf("dead-letter topic holds %v, want one temporal_permanent (written once)", got)
			}
		})
	}
}

// A start that fails transiently is retried, never dead-lettered: three
// failures, then one execution, the offset committed, nothing in the
// dead-letter topic.
func TestTransientStartErrorsAreRetried(t *testing.T) {
	e := newTestEnv(t, 1, envOpt{})
	w := wid("x")
	e.starter.failTransient(w, 3)
	e.produce(0, "x", "v")
	rn := e.start("r1", e.config())
	e.waitCommittedToEnd(10 * time.Second)
	if err := rn.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if n := e.starter.callCount(w); n != 4 {
		t.Errorf("%d start calls, want 4 (3 transient failures, then the start)", n)
	}
	if n := len(e.starter.executionsOf(w)); n != 1 {
		t.Errorf("%d executions, want 1", n)
	}
	if got := e.dlqReasons(); len(got) != 0 {
		t.Errorf("dead letters %v after transient errors", got)
	}
}

// afterFirstMark releases the starts of ids at the first MarkStarted (a
// tick of the marker with something to mark), and makes every mark take
// rtt: their starts then wait a whole starts.mark_interval for the next
// tick. marked reports when that first mark was sent.
func (e *testEnv) afterFirstMark(rtt time.Duration, ids ...string) (marked func() time.Time) {
	var releases []func()
	for _, id := range ids {
		r := e.starter.block(wid(id))
		e.t.Cleanup(r)
		releases = append(releases, r)
	}
	var mu sync.Mutex
	var first time.Time
	e.led.mu.Lock()
	e.led.markGate = func([]int32) {
		mu.Lock()
		if first.IsZero() {
			first = time.Now()
		}
		mu.Unlock()
		for _, r := range releases {
			r()
		}
		time.Sleep(rtt)
	}
	e.led.mu.Unlock()
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return first
	}
}

// With the default starts.mark_interval (250ms) and revoke_timeout (10s),
// a partition revoked by a real rebalance (another member joins) just
// after its record's workflow started, the mark of that start a whole
// interval away: the revoke waits for the mark and commits the record
// before the partition moves. Checks the revoked partition's committed
// offset as soon as the router no longer owns it (the other member never
// commits). (adversary 32)
func TestARevokeWithTheDefaultMarkIntervalCommitsWhatStartedBeforeIt(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 2, envOpt{})
	def := DefaultConfig()
	cfg := e.config()
	cfg.Starts.MarkInterval = def.Starts.MarkInterval
	cfg.RevokeTimeout = def.RevokeTimeout
	e.afterFirstMark(20*time.Millisecond, "a0", "a1")
	e.produce(0, "s0", "v")
	e.produce(1, "s1", "v")
	e.produce(0, "a0", "v")
	e.produce(1, "a1", "v")
	rn := e.start("r1", cfg)
	eventually(t, 10*time.Second, func() bool {
		return len(rn.owned()) == 2 && len(e.starter.executionsOf(wid("a0"))) == 1 && len(e.starter.executionsOf(wid("a1"))) == 1
	}, func() string { return fmt.Sprintf("r1 owns %v; a0, a1 not started", rn.owned()) })
	other := e.otherMember()
	defer other.Close()
	eventually(t, 10*time.Second, func() bool { return len(rn.owned()) == 1 }, func() string {
		return fmt.Sprintf("r1 owns %v: want one partition moved to the other member", rn.owned())
	})
	moved := int32(0)
	if rn.owned()[0] {
		moved = 1
	}
	if c := e.committed()[moved]; c != 2 {
		t.Errorf("revoked partition %d committed %d, want 2 (both its records' workflows started before the revoke)", moved, c)
	}
}

// Validate accepts a kafka.revoke_timeout just above starts.mark_interval
// (260ms over the default 250ms): a revoke that begins just after a
// record's workflow started, its mark a whole interval away, must still
// commit it (or Validate refuse the config, naming the field). The revoke
// is the committer's revoked callback, called directly just after a's
// start (a real rebalance's moment cannot be chosen); each mark takes
// 20ms (PostgreSQL in another zone). Failed every run before a486b0e: the mark lands about
// 250ms + 20ms after the start, past the revoke's 260ms wait, so the
// revoke abandons a, started before it, uncommitted: Validate's bound
// (mark_interval < revoke_timeout) leaves no room for the mark's own round
// trip. (adversary 32)
func TestARevokeTimeoutJustAboveTheDefaultMarkIntervalCommitsWhatStartedBeforeIt(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 1, envOpt{})
	def := DefaultConfig()
	cfg := e.config()
	cfg.Starts.MarkInterval = def.Starts.MarkInterval
	cfg.RevokeTimeout = def.Starts.MarkInterval + 10*time.Millisecond
	if err := cfg.Validate(); err != nil {
		if strings.Contains(err.Error(), "revoke_timeout") || strings.Contains(err.Error(), "starts.mark_interval") {
			return // refused, naming the field: the guarantee holds
		}
		t.Fatalf("Validate: %v", err)
	}
	marked := e.afterFirstMark(20*time.Millisecond, "a")
	e.produce(0, "s", "v")
	e.produce(0, "a", "v")
	rn := e.start("r1", cfg)
	eventually(t, 10*time.Second, func() bool { return len(e.starter.executionsOf(wid("a"))) == 1 },
		func() string { return "a not started" })
	since := time.Since(marked())
	t0 := time.Now()
	rn.r.commits.revoked(context.Background(), rn.r.cl, map[string][]int32{testTopic: {0}})
	t.Logf("revoke began %v after s's mark, took %v", since.Round(time.Millisecond), time.Since(t0).Round(time.Millisecond))
	if c := e.committed()[0]; c != 2 {
		t.Errorf("committed %d after the revoke, want 2 (a's workflow started before it; revoke_timeout %v, mark_interval %v)",
			c, cfg.RevokeTimeout, cfg.Starts.MarkInterval)
	}
}

// kafka.commit_interval below the default starts.mark_interval (50ms
// against 250ms; Validate accepts it): commits run five times between two
// marks, and must commit only what is marked, all of it in the end. Each
// look at the group's offset checks that every record below it has its
// workflow marked (started in the ledger); then everything is committed
// and started once. (adversary 32)
func TestACommitIntervalBelowTheDefaultMarkIntervalCommitsOnlyMarkedRecords(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 1, envOpt{})
	def := DefaultConfig()
	cfg := e.config()
	cfg.Starts.MarkInterval = def.Starts.MarkInterval
	cfg.RevokeTimeout = def.RevokeTimeout
	cfg.CommitInterval = 50 * time.Millisecond
	rn := e.start("r1", cfg)
	rn.waitJoined()
	var ids []string
	for i := range 30 {
		id := fmt.Sprintf("e%d", i)
		ids = append(ids, id)
		e.produce(0, id, "v")
		if i%10 == 9 {
			time.Sleep(100 * time.Millisecond)
		}
	}
	eventually(t, 10*time.Second, func() bool {
		c := e.committed()[0]
		for off := int64(0); off < c; off++ {
			if st := e.led.state(wid(ids[off])); st != stateStarted {
				t.Fatalf("committed %d while %s (offset %d) is %q, not marked", c, ids[off], off, st)
			}
		}
		return c == int64(len(ids))
	}, func() string { return fmt.Sprintf("committed %v", e.committed()) })
	if err := rn.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	for _, id := range ids {
		if n := len(e.starter.executionsOf(wid(id))); n != 1 {
			t.Errorf("%s: %d executions", id, n)
		}
	}
}

// A revoke that waits its whole revoke_timeout (a start of the revoked
// partition hangs: h) while the other partition keeps starting hundreds
// of workflows a second: the revoke's hurry (a486b0e) makes the marker
// send each mark as its job comes, with what is queued. It must not
// flood the ledger: at most one MarkStarted statement per job marked
// during the hurry, none without a job, and once the revoke is over the
// marker batches again (statements per job well below one). Every record
// of the other partition is still marked and committed, each workflow
// started once. (adversary 32b)
func TestAHurriedRevokeUnderLoadSendsAtMostOneMarkStatementPerJob(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 2, envOpt{})
	def := DefaultConfig()
	cfg := e.config()
	cfg.Starts.MarkInterval = def.Starts.MarkInterval
	cfg.RevokeTimeout = time.Second
	releaseH := e.starter.block(wid("h"))
	defer releaseH()
	var calls, rows atomic.Int64
	e.led.mu.Lock()
	e.led.markGate = func(ps []int32) {
		calls.Add(1)
		rows.Add(int64(len(ps)))
	}
	e.led.mu.Unlock()
	e.produce(0, "h", "v")
	rn := e.start("r1", cfg)
	eventually(t, 10*time.Second, func() bool { return e.starter.heldCount(wid("h")) == 1 }, func() string { return "h's start not held" })
	stop := make(chan struct{})
	var produced atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			e.produce(1, fmt.Sprintf("l%d", i), "v")
			produced.Add(1)
		}
	}()
	time.Sleep(500 * time.Millisecond) // load established
	c0, r0, p0 := calls.Load(), rows.Load(), produced.Load()
	t0 := time.Now()
	rn.r.commits.revoked(context.Background(), rn.r.cl, map[string][]int32{testTopic: {0}})
	took := time.Since(t0)
	c1, r1, p1 := calls.Load(), rows.Load(), produced.Load()
	time.Sleep(time.Second) // not hurried
	c2, r2, p2 := calls.Load(), rows.Load(), produced.Load()
	close(stop)
	wg.Wait()
	t.Logf("revoke took %v: %d statements for %d rows marked, %d produced; after it, 1s: %d statements for %d rows, %d produced; hurried %d",
		took.Round(time.Millisecond), c1-c0, r1-r0, p1-p0, c2-c1, r2-r1, p2-p1, rn.r.starts.hurried.Load())
	if took < cfg.RevokeTimeout {
		t.Fatalf("revoke took %v, want its whole revoke_timeout (h hangs)", took)
	}
	if c1-c0 > r1-r0 {
		t.Errorf("hurried revoke: %d MarkStarted statements for %d rows marked: more than one per job", c1-c0, r1-r0)
	}
	if n := rn.r.starts.hurried.Load(); n != 0 {
		t.Errorf("hurried %d after the revoke, want 0", n)
	}
	if r2-r1 > 20 && c2-c1 > (r2-r1)/2 {
		t.Errorf("after the revoke: %d statements for %d rows: the marker no longer batches", c2-c1, r2-r1)
	}
	eventually(t, 10*time.Second, func() bool { return e.committed()[1] == e.ends()[1] }, func() string {
		return fmt.Sprintf("partition 1 committed %v, ends %v", e.committed(), e.ends())
	})
	for i := range int(produced.Load()) {
		if n := len(e.starter.executionsOf(wid(fmt.Sprintf("l%d", i)))); n != 1 {
			t.Errorf("l%d: %d executions", i, n)
		}
	}
}

// Two revokes at once (two partitions, each revoked by its own call, as
// two rebalances' callbacks overlapping could), each just after a
// record's workflow started, its mark a whole default interval away and
// revoke_timeout just above it (260ms): both hurry the marker (its
// counter at two), both commit what started before them, and the
// counter is back at zero after, whatever order they end in. (adversary
// 32b)
func TestTwoRevokesAtOnceEachCommitWhatStartedBeforeIt(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 2, envOpt{})
	def := DefaultConfig()
	cfg := e.config()
	cfg.Starts.MarkInterval = def.Starts.MarkInterval
	cfg.RevokeTimeout = def.Starts.MarkInterval + 10*time.Millisecond
	e.afterFirstMark(20*time.Millisecond, "a", "b")
	e.produce(0, "s", "v")
	e.produce(0, "a", "v")
	e.produce(1, "b", "v")
	rn := e.start("r1", cfg)
	eventually(t, 10*time.Second, func() bool {
		return len(e.starter.executionsOf(wid("a"))) == 1 && len(e.starter.executionsOf(wid("b"))) == 1
	}, func() string { return "a or b not started" })
	var wg sync.WaitGroup
	for p := range int32(2) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rn.r.commits.revoked(context.Background(), rn.r.cl, map[string][]int32{testTopic: {p}})
		}()
	}
	wg.Wait()
	if c := e.committed(); c[0] != 2 || c[1] != 1 {
		t.Errorf("committed %v after the two revokes, want 0:2 1:1 (a and b started before them)", c)
	}
	if n := rn.r.starts.hurried.Load(); n != 0 {
		t.Errorf("hurried %d after both revokes, want 0", n)
	}
}

// A partition lost (no revoke: kgo.OnPartitionsLost) while a revoke of
// another hurries the marker (h hangs: the revoke waits its whole
// revoke_timeout), the lost partition's workflows starting hundreds a
// second: its records marked or not while it is forgotten end once each
// (no record in flight after Run, none negative), nothing of it is
// committed past a record whose workflow is not marked, and the hurry's
// counter is back at zero. (adversary 32b)
func TestAPartitionLostDuringAHurriedRevokeEndsItsRecordsOnceAndCommitsOnlyMarked(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 2, envOpt{})
	def := DefaultConfig()
	cfg := e.config()
	cfg.Starts.MarkInterval = def.Starts.MarkInterval
	cfg.RevokeTimeout = time.Second
	releaseH := e.starter.block(wid("h"))
	defer releaseH()
	e.produce(0, "h", "v")
	rn := e.start("r1", cfg)
	eventually(t, 10*time.Second, func() bool { return e.starter.heldCount(wid("h")) == 1 }, func() string { return "h's start not held" })
	stop := make(chan struct{})
	var produced atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			e.produce(1, fmt.Sprintf("l%d", i), "v")
			produced.Add(1)
		}
	}()
	time.Sleep(300 * time.Millisecond)
	revoked := make(chan struct{})
	go func() {
		defer close(revoked)
		rn.r.commits.revoked(context.Background(), rn.r.cl, map[string][]int32{testTopic: {0}})
	}()
	time.Sleep(300 * time.Millisecond)
	rn.r.commits.lost(context.Background(), rn.r.cl, map[string][]int32{testTopic: {1}})
	<-revoked
	close(stop)
	wg.Wait()
	c := e.committed()[1]
	if err := rn.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	rn.r.commits.flight.mu.Lock()
	n := rn.r.commits.flight.n
	rn.r.commits.flight.mu.Unlock()
	t.Logf("produced %d on partition 1, committed %d when lost, %d after Run", produced.Load(), c, e.committed()[1])
	if n != 0 {
		t.Errorf("%d records in flight after Run, want 0 (negative: ended twice)", n)
	}
	if h := rn.r.starts.hurried.Load(); h != 1 { // the drain's, for the rest of the run
		t.Errorf("hurried %d after Run, want 1 (the drain's)", h)
	}
	c = e.committed()[1]
	for off := range c {
		if st := e.led.state(wid(fmt.Sprintf("l%d", off))); st != stateStarted {
			t.Errorf("partition 1 committed %d while l%d is %q", c, off, st)
			break
		}
	}
}

// A hurried revoke (h hangs: the whole revoke_timeout) while a member the
// group dropped takes the other partition in the ledger before every
// mark of its records, those records coming by the hundred a second:
// each mark is refused, the partition taken again, the mark sent again
// (three times at once, then after a wait). Batched at the mark
// interval, one tick's refusals cover every job of the batch; sent one
// job at a time by the hurry (a486b0e), each job pays its own refusals.
// Wants the hurry to add at most one MarkStarted statement per job
// started during it to what the marker sends without a hurry (the ghost's
// takes also refuse the claims of that partition, so few jobs start: the
// waiting marks' re-sends dominate). (adversary 32b)
func TestAHurriedRevokeWithAGhostTakingAnotherPartitionSendsAtMostOneMarkStatementPerJob(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 2, envOpt{})
	def := DefaultConfig()
	cfg := e.config()
	cfg.Starts.MarkInterval = def.Starts.MarkInterval
	cfg.RevokeTimeout = time.Second
	releaseH := e.starter.block(wid("h"))
	defer releaseH()
	var calls, rows atomic.Int64
	var ghost atomic.Bool
	e.led.mu.Lock()
	e.led.markGate = func(ps []int32) {
		calls.Add(1)
		rows.Add(int64(len(ps)))
		if ghost.Load() && slices.Contains(ps, 1) {
			e.ghostOwn(1)
		}
	}
	e.led.mu.Unlock()
	e.produce(0, "h", "v")
	rn := e.start("r1", cfg)
	eventually(t, 10*time.Second, func() bool { return e.starter.heldCount(wid("h")) == 1 }, func() string { return "h's start not held" })
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond): // a few hundred a second
			}
			e.produce(1, fmt.Sprintf("l%d", i), "v")
		}
	}()
	ghost.Store(true)
	time.Sleep(500 * time.Millisecond)
	c0, r0, s0 := calls.Load(), rows.Load(), e.starter.executionCounts()
	rn.r.commits.revoked(context.Background(), rn.r.cl, map[string][]int32{testTopic: {0}})
	c1, s1 := calls.Load(), e.starter.executionCounts()
	time.Sleep(time.Second) // not hurried
	c2, s2 := calls.Load(), e.starter.executionCounts()
	close(stop)
	wg.Wait()
	ghost.Store(false)
	jobs := len(s1) - len(s0)
	t.Logf("hurried revoke: %d statements (%d rows) for %d jobs started; after it, 1s: %d statements for %d jobs",
		c1-c0, rows.Load()-r0, jobs, c2-c1, len(s2)-len(s1))
	if c1-c0 > int64(jobs)+2*(c2-c1)+10 {
		t.Errorf("hurried revoke: %d MarkStarted statements for %d jobs started (%d in the second after it): more than one more per job",
			c1-c0, jobs, c2-c1)
	}
}

// mixedRecords are records of every kind the router reads, n of them for
// partition 0 (one produce call: one fetched batch) and a few for partition 1: event IDs from a header (the first of
// two of one name; a nil and an empty header next to it), from the JSON
// id field and derived from the content; null keys; tombstones (nil
// value); empty values; a header ID header with a nil value (present,
// empty); values that are not JSON (dead letters, with duplicate header
// names and nil and empty header values); types no route matches; copies
// of earlier events, the same and with another payload (a conflict,
// dead-lettered by the claimer); and a traceparent header on every fifth.
func mixedRecords(n int) []*kgo.Record {
	hdr := func(kv ...any) []kgo.RecordHeader {
		var hs []kgo.RecordHeader
		for i := 0; i+1 < len(kv); i += 2 {
			var v []byte
			switch x := kv[i+1].(type) {
			case string:
				v = []byte(x)
			case []byte:
				v = x
			}
			hs = append(hs, kgo.RecordHeader{Key: kv[i].(string), Value: v})
		}
		return hs
	}
	var out []*kgo.Record
	for i := range n {
		r := &kgo.Record{Topic: testTopic, Partition: 0, Key: fmt.Appendf(nil, "k%d", i)}
		id := fmt.Sprintf("m%d", i)
		switch i % 10 {
		case 0:
			r.Value = value(id, "v")
		case 1:
			r.Key, r.Value = nil, fmt.Appendf(nil, `{"type":%q,"data":{"n":%d}}`, testType, i)
		case 2:
			r.Value = nil // a tombstone
		case 3:
			r.Value = []byte{}
		case 4:
			r.Value = fmt.Appendf(nil, `{"type":%q,"data":{"n":%d}}`, testType, i)
			r.Headers = hdr("idempotency-key", "h-"+id, "idempotency-key", "dup", "nil", nil, "empty", []byte{})
		case 5:
			r.Value = value(id, "v")
			r.Headers = hdr("ce_id", nil, "idempotency-key", "h-"+id)
		case 6:
			r.Key = nil
			r.Value = []byte("not json " + id)
			r.Headers = hdr("a", "1", "a", nil, "b", []byte{}, "a", "3")
		case 7:
			r.Value = fmt.Appendf(nil, `{"id":%q,"type":"other.type","data":{}}`, id)
		case 8:
			r.Value = value(fmt.Sprintf("m%d", i-8), "v") // a copy of m<i-8>
		case 9:
			r.Value = value(fmt.Sprintf("m%d", i-9), "other") // m<i-9> with another payload
			r.Headers = hdr("x", "y", "nil", nil)
		}
		if i%5 == 0 {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: "traceparent", Value: fmt.Appendf(nil, "00-%032x-b7ad6b7169203331-01", i+1)})
		}
		out = append(out, r)
	}
	for i := range 5 {
		out = append(out, &kgo.Record{Topic: testTopic, Partition: 1, Value: value(fmt.Sprintf("p1-%d", i), "v"),
			Headers: hdr("h", fmt.Sprint(i))})
	}
	return out
}

// sameBytes reports whether a and b are equal, nil being nil.
func sameBytes(a, b []byte) bool { return (a == nil) == (b == nil) && bytes.Equal(a, b) }

// The router behaves for every record as the decider decides the client's
// own fetched record (adversary 34). 300 mixed records
// (mixedRecords) in one batch on partition 0, a few on partition 1, and
// transactions on partition 1 (one committed, one aborted: control
// records) are read back by a plain read_committed client and decided
// directly; the router, with tracing on (its decide spans continue each
// record's traceparent), must then claim exactly those intents (workflow
// ID, event ID, ID rule, payload hash), dead-letter exactly those records
// with their reasons (plus the conflicting copies), each dead letter
// carrying its source's key, value and headers exactly (nil stays nil,
// empty empty), and commit everything. Run it with -race too: decide runs
// on parallel workers (300 records).
func TestTheRouterDecidesEveryKindOfRecordAsTheClientFetchedIt(t *testing.T) {
	e := newTestEnv(t, 2, envOpt{})
	const n = 300
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := e.cl.ProduceSync(ctx, mixedRecords(n)...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	tx := e.txProducer("tx-mixed")
	tx.begin(txEvent{1, "tx-c1"}, txEvent{1, "tx-c2"})
	tx.end(true)
	tx.begin(txEvent{1, "tx-a1"})
	tx.end(false)
	e.produce(1, "after-tx", "v")

	cfg := e.config()
	dec, err := NewDecider(cfg)
	if err != nil {
		t.Fatal(err)
	}
	type at struct {
		p   int32
		off int64
	}
	// What the decider makes of each record as the client fetched it.
	src := map[at]*kgo.Record{}
	wantIntents := map[at][]decide.Intent{}
	wantDead := map[at]string{}
	cons, err := kgo.NewClient(kgo.SeedBrokers(e.cluster.ListenAddrs()...), kgo.ConsumeTopics(testTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	for len(src) < n+5+3 && ctx.Err() == nil {
		cons.PollFetches(ctx).EachRecord(func(kr *kgo.Record) {
			k := at{kr.Partition, kr.Offset}
			src[k] = kr
			d := dec.Decide(kr)
			switch {
			case d.DeadLetter != "":
				wantDead[k] = string(d.DeadLetter)
			case len(d.Intents) > 0:
				wantIntents[k] = d.Intents
			}
		})
	}
	cons.Close()
	if len(src) != n+5+3 {
		t.Fatalf("set-up: read %d records, want %d", len(src), n+5+3)
	}

	exp := tracetest.NewInMemoryExporter()
	tr := tracing.NewWith(tracing.Config{Exporter: tracing.ExporterOTLP}, "test", sdktrace.WithSyncer(exp))
	rn, _ := e.startTraced(cfg, tr)
	e.waitCommittedToEnd(30 * time.Second)
	if err := rn.stop(); err != nil {
		t.Fatal(err)
	}

	// Claims: every intent the decider made, each as it made it, and no
	// other record claimed.
	got := map[at][]decide.Intent{}
	for _, c := range e.led.claimLog() {
		for _, in := range c {
			k := at{in.Partition, in.Offset}
			if !slices.ContainsFunc(got[k], func(g decide.Intent) bool { return g.WorkflowID == in.WorkflowID }) {
				in.Fence = decide.Fence{}
				got[k] = append(got[k], in)
			}
		}
	}
	for k, want := range wantIntents {
		if len(got[k]) != len(want) {
			t.Errorf("%d@%d: claimed %+v, want %+v", k.off, k.p, got[k], want)
			continue
		}
		for j := range want {
			if got[k][j] != want[j] {
				t.Errorf("%d@%d: claimed %+v, want %+v", k.off, k.p, got[k][j], want[j])
			}
		}
	}
	for k := range got {
		if wantIntents[k] == nil {
			t.Errorf("%d@%d claimed (%+v), the decider makes no intent of it", k.off, k.p, got[k])
		}
	}

	// Dead letters: the decider's, with their reasons, and the conflicts;
	// each with its source's key, value and headers exactly.
	gotDead := map[at]string{}
	for _, dl := range e.dlqRecords() {
		p, _ := headerOf(dl, schemas.HeaderDLQPartition)
		o, _ := headerOf(dl, schemas.HeaderDLQOffset)
		reason, _ := headerOf(dl, schemas.HeaderDLQReason)
		var k at
		if _, err := fmt.Sscan(p+" "+o, &k.p, &k.off); err != nil {
			t.Fatalf("dead letter without its coordinates: %v", dl.Headers)
		}
		gotDead[k] = reason
		s := src[k]
		if s == nil {
			t.Errorf("dead letter of %d@%d, no such record", k.off, k.p)
			continue
		}
		var own []kgo.RecordHeader
		for _, h := range dl.Headers {
			if !slices.Contains(schemas.DeadLetterHeaders, h.Key) {
				own = append(own, h)
			}
		}
		if !sameBytes(dl.Key, s.Key) || !sameBytes(dl.Value, s.Value) || len(own) != len(s.Headers) {
			t.Errorf("dead letter of %d@%d: key %q (nil %v), value %q (nil %v), headers %+v; want key %q (nil %v), value %q (nil %v), headers %+v",
				k.off, k.p, dl.Key, dl.Key == nil, dl.Value, dl.Value == nil, own, s.Key, s.Key == nil, s.Value, s.Value == nil, s.Headers)
			continue
		}
		for j, h := range own {
			if h.Key != s.Headers[j].Key || !sameBytes(h.Value, s.Headers[j].Value) {
				t.Errorf("dead letter of %d@%d: header %d %q=%q (nil %v), want %q=%q (nil %v)", k.off, k.p, j, h.Key, h.Value, h.Value == nil,
					s.Headers[j].Key, s.Headers[j].Value, s.Headers[j].Value == nil)
			}
		}
	}
	for k, reason := range wantDead {
		if gotDead[k] != reason {
			t.Errorf("%d@%d: dead-lettered %q, want %q", k.off, k.p, gotDead[k], reason)
		}
	}
	conflicts := 0
	for k, reason := range gotDead {
		if _, ok := wantDead[k]; !ok {
			if reason != string(decide.ReasonConflict) {
				t.Errorf("%d@%d: dead-lettered %q, the decider does not dead-letter it", k.off, k.p, reason)
			}
			conflicts++
		}
	}
	if conflicts != n/10 {
		t.Errorf("%d conflicts dead-lettered, want %d", conflicts, n/10)
	}

	t.Logf("%d records: %d with intents (%d claimed), %d dead letters by the decider, %d conflicts", len(src), len(wantIntents), len(got),
		len(wantDead), conflicts)
	// Traces: each traced record's decide span continues its traceparent.
	decided, traced := map[int64]trace.TraceID{}, 0
	for _, s := range exp.GetSpans() {
		if s.Name == "dedup.decide" && attrOf(s, attrPartition).AsInt64() == 0 {
			decided[attrOf(s, attrOffset).AsInt64()] = s.SpanContext.TraceID()
		}
	}
	for k, s := range src {
		if v, ok := headerOf(s, "traceparent"); ok && k.p == 0 {
			tid, err := trace.TraceIDFromHex(strings.Split(v, "-")[1])
			if err != nil {
				t.Fatal(err)
			}
			traced++
			if decided[k.off] != tid {
				t.Errorf("%d@0: decide span in trace %s, want %s (its traceparent)", k.off, decided[k.off], tid)
			}
		}
	}
	t.Logf("%d traced records checked", traced)
}

// Adversary 50d (d/lag client): internal/app hands the router
// kgo.WithHooks(kprom.NewMetrics(...)) in Options.KafkaOpts, as
// Options.KafkaOpts' own doc suggests ("kprom hooks"). The lag watch's own
// client is made from the same options, so kprom's OnNewClient runs a
// second time on the same Metrics and registry. The router must keep
// running (no panic in the lag goroutine) and kprom's kafka_* metrics must
// still be exported after the lag client closes (OnClientClosed
// unregisters them).
//
// The router runs in a child process so that a panic in one of its
// goroutines fails this test rather than the whole package.
func TestARouterWithKpromHooksInKafkaOptsKeepsRunningAndExportsKafkaMetrics(t *testing.T) {
	if os.Getenv("ADV50D_KPROM_CHILD") == "1" {
		kpromChild(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestARouterWithKpromHooksInKafkaOptsKeepsRunningAndExportsKafkaMetrics$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "ADV50D_KPROM_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		lines := strings.Split(string(out), "\n")
		var keep []string
		for _, l := range lines {
			if strings.Contains(l, "panic") || strings.Contains(l, "adversary50d") || strings.Contains(l, "FAIL") || strings.Contains(l, "lag") {
				keep = append(keep, l)
			}
			if len(keep) > 25 {
				break
			}
		}
		t.Fatalf("the router with kprom hooks in KafkaOpts (as internal/app runs it) did not keep running: %v\n%s", err, strings.Join(keep, "\n"))
	}
}

func kpromChild(t *testing.T) {
	e := newTestEnv(t, 1, envOpt{})
	cfg := e.config()
	reg := prometheus.NewRegistry()
	km := kprom.NewMetrics("kafka", kprom.Registerer(reg), kprom.Gatherer(reg))
	r, err := New(cfg, Options{Ledger: e.led, DeadLetterLog: e.dlq, Starter: e.starter.as("r"), Registerer: reg, Log: testLogger("r"),
		KafkaOpts: []kgo.Opt{kgo.HeartbeatInterval(100 * time.Millisecond), kgo.WithHooks(km)}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	e.produce(0, "a", "v")
	eventually(t, 10*time.Second, func() bool { return e.led.state(wid("a")) == stateStarted },
		func() string { return "a never started" })
	// Both series appear once measured (the lag every LagInterval, after
	// its offsets' round trips): waited for, not slept on.
	var kafka, lag bool
	eventually(t, 10*time.Second, func() bool {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			kafka = kafka || strings.HasPrefix(mf.GetName(), "kafka_")
			lag = lag || mf.GetName() == "dedup_consumer_lag"
		}
		return kafka && lag
	}, func() string {
		return fmt.Sprintf("while the router runs: a kafka_* (kprom) metric in the registry %v, dedup_consumer_lag %v", kafka, lag)
	})
}
