package processor

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/schemas"
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
	polled := rn.polled
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

// A claim never holds one record twice: a poll that waited for the
// claimer across a revoke of its partition, and the poll of the same
// records after the partition was assigned back (redelivered from the
// committed offset), are claimed apart (gatherPolls leaves the second
// for the next claim). Claimed together, both copies of a conflicting
// record were dead-lettered in one write, and the dead-letter log, asked
// about both before either was recorded, let both through: one record,
// two dead letters. Claimed apart, the second finds the first's dead
// letter in the log and is not written again.
func TestAMergedClaimDeadLettersARecordRedeliveredBetweenItsPollsOnce(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 2, envOpt{})
	e.led.seed(wid("c"), stateStarted, e.hashOf("c", "v1"))
	release := e.holdFirstClaim()
	rn := e.start("r1", e.config())
	owned := rn.owned
	polled := rn.polled
	// The claimer is held in the claim of h; the poll of c@1 waits for it.
	// Partition 1 goes to another member and comes back: c@1 is polled
	// again under the new assignment.
	offC, other := e.pollOfCWaitsAndPartitionOneMoves(rn, "v2")
	other.Close()
	eventually(t, 10*time.Second, func() bool { return len(owned()) == 2 && polled() == 3 }, func() string {
		return fmt.Sprintf("r1 owns %v, polled %v: want partition 1 back and c@1 polled again", owned(), polled())
	})
	time.Sleep(100 * time.Millisecond)

	release()
	e.waitCommittedToEnd(10 * time.Second)
	if err := rn.stop(); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range e.dlqRecords() {
		var part, off string
		for _, h := range r.Headers {
			switch h.Key {
			case schemas.HeaderDLQPartition:
				part = string(h.Value)
			case schemas.HeaderDLQOffset:
				off = string(h.Value)
			}
		}
		if part == "1" && off == fmt.Sprint(offC) {
			n++
		}
	}
	if n != 1 {
		var claims []string
		for _, c := range e.led.claimLog() {
			var ins []string
			for _, in := range c {
				ins = append(ins, fmt.Sprintf("%s@%d/%d(epoch %d)", in.EventID, in.Partition, in.Offset, in.Fence.Epoch))
			}
			claims = append(claims, "["+strings.Join(ins, " ")+"]")
		}
		t.Errorf("c@1/%d dead-lettered %d times, want once; claims: %s", offC, n, strings.Join(claims, " "))
	}
}

// The claimer loop of Run, on polls already waiting in its queue: a held
// poll is the next claim's first, gathered with the poll behind it unless
// it too reads its partition again; no poll is lost, none claimed twice,
// and the polls are claimed in their order, q closed or not.
func TestAHeldPollIsClaimedBeforeTheNextPollOfItsPartition(t *testing.T) {
	poll := func(name string, tp ...any) *claimBatch {
		b := &claimBatch{}
		for i := 0; i < len(tp); i += 2 {
			b.intents = append(b.intents, decide.Intent{Topic: tp[i].(string), Partition: 0, Offset: int64(tp[i+1].(int)), EventID: name})
			b.starts = append(b.starts, startRef{})
			b.owners = append(b.owners, &record{})
		}
		return b
	}
	run := func(polls ...*claimBatch) [][]string {
		q := make(chan *claimBatch, len(polls))
		for _, p := range polls[1:] {
			q <- p
		}
		close(q)
		var claims [][]string
		var held *claimBatch
		b := polls[0]
		for {
			if held != nil {
				b = held
			} else if b == nil {
				var ok bool
				if b, ok = <-q; !ok {
					break
				}
			}
			var c *claimBatch
			c, held = gatherPolls(b, q)
			var names []string
			for _, in := range c.intents {
				names = append(names, fmt.Sprintf("%s:%s@%d", in.EventID, in.Topic, in.Offset))
			}
			claims = append(claims, names)
			b = nil
		}
		return claims
	}
	for _, tc := range []struct {
		name  string
		polls []*claimBatch
		want  string
	}{
		{"held then new", []*claimBatch{poll("p1", "t", 5, "t", 6), poll("p2", "t", 5), poll("p3", "t", 7)},
			"[[p1:t@5 p1:t@6] [p2:t@5 p3:t@7]]"},
		{"held reads again", []*claimBatch{poll("p1", "t", 5, "t", 6), poll("p2", "t", 5, "t", 6), poll("p3", "t", 6)},
			"[[p1:t@5 p1:t@6] [p2:t@5 p2:t@6] [p3:t@6]]"},
		{"two topics same partition", []*claimBatch{poll("p1", "t", 5), poll("p2", "u", 5), poll("p3", "t", 5)},
			"[[p1:t@5 p2:u@5] [p3:t@5]]"},
		{"higher offset", []*claimBatch{poll("p1", "t", 5), poll("p2", "t", 8)}, "[[p1:t@5 p2:t@8]]"},
	} {
		if got := fmt.Sprint(run(tc.polls...)); got != tc.want {
			t.Errorf("%s: claims %s, want %s", tc.name, got, tc.want)
		}
	}
}

// A poll that waited for the claimer across a move of its partition, to
// a member that finished and committed its records, and the first poll
// after the partition came back (from the other member's commit: higher
// offsets, not a re-read) are gathered (readsAgain is false). The
// waiting poll's copy of c, from the assignment before, is refused by
// the fence and claimed again under the new one: a duplicate of the row
// the other member started. Temporal hears nothing of c from r1, d starts
// once, and both partitions commit to their ends.
func TestAGatheredPollFromAnEarlierAssignmentStartsNothingTheOtherMemberStarted(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 2, envOpt{})
	release := e.holdFirstClaim()
	rn := e.start("r1", e.config())
	owned := rn.owned
	polled := rn.polled
	offC, other := e.pollOfCWaitsAndPartitionOneMoves(rn, "v")
	// The other member started c and committed past it.
	e.led.seed(wid("c"), stateStarted, e.hashOf("c", "v"))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	eventually(t, 10*time.Second, func() bool {
		var cerr error
		other.CommitOffsetsSync(ctx, map[string]map[int32]kgo.EpochOffset{testTopic: {1: {Epoch: -1, Offset: offC + 1}}},
			func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
				cerr = err
				if err == nil {
					for _, tp := range resp.Topics {
						for _, p := range tp.Partitions {
							if p.ErrorCode != 0 {
								cerr = fmt.Errorf("commit error %d", p.ErrorCode)
							}
						}
					}
				}
			})
		return cerr == nil && e.committed()[1] == offC+1
	}, func() string { return fmt.Sprintf("the other member could not commit: committed %v", e.committed()) })
	other.Close()
	eventually(t, 10*time.Second, func() bool { return len(owned()) == 2 }, func() string {
		return fmt.Sprintf("r1 owns %v: want partition 1 back", owned())
	})
	e.produce(1, "d", "v")
	eventually(t, 10*time.Second, func() bool { return polled() == 3 }, func() string { return fmt.Sprintf("polled %v", polled()) })
	time.Sleep(100 * time.Millisecond)

	release()
	e.waitCommittedToEnd(10 * time.Second)
	if err := rn.stop(); err != nil {
		t.Fatal(err)
	}
	var claims []string
	for _, c := range e.led.claimLog() {
		var ins []string
		for _, in := range c {
			ins = append(ins, fmt.Sprintf("%s@%d/%d(epoch %d)", in.EventID, in.Partition, in.Offset, in.Fence.Epoch))
		}
		claims = append(claims, "["+strings.Join(ins, " ")+"]")
	}
	t.Logf("claims: %s", strings.Join(claims, " "))
	if n := e.starter.callCount(wid("c")); n != 0 {
		t.Errorf("c: %d Temporal start calls from r1, want 0 (the other member started it)", n)
	}
	if n := len(e.starter.executionsOf(wid("d"))); n != 1 {
		t.Errorf("d: %d executions, want 1", n)
	}
	if n := len(e.dlqRecords()); n != 0 {
		t.Errorf("%d dead letters, want 0", n)
	}
}

// A router stopped while a poll is held (it read its partition again, the
// partition having moved away and back) leaves the held poll and the poll
// before it uncommitted, and the next router starts each record once and
// commits to the end: the held poll is neither lost past a commit nor
// started twice.
func TestAHeldPollAtShutdownIsNotCommittedPastAndStartsOnceAfter(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 2, envOpt{})
	release := e.holdFirstClaim()
	rn := e.start("r1", e.config())
	owned := rn.owned
	polled := rn.polled
	offC, other := e.pollOfCWaitsAndPartitionOneMoves(rn, "v")
	other.Close()
	eventually(t, 10*time.Second, func() bool { return len(owned()) == 2 && polled() == 3 }, func() string {
		return fmt.Sprintf("r1 owns %v, polled %v: want partition 1 back and c@1 polled again", owned(), polled())
	})
	e.produce(1, "d", "v")
	time.Sleep(300 * time.Millisecond)
	// Stop with c's two polls waiting (one of them held), then free the
	// claimer.
	rn.cancel()
	time.Sleep(50 * time.Millisecond)
	release()
	if err := rn.stop(); err != nil {
		t.Fatal(err)
	}
	if c := e.committed()[1]; c > offC {
		t.Errorf("partition 1 committed %d, past c (offset %d): c executions %d", c, offC, len(e.starter.executionsOf(wid("c"))))
	}
	r2 := e.start("r2", e.config())
	e.waitCommittedToEnd(10 * time.Second)
	if err := r2.stop(); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"h", "c", "d"} {
		if n := len(e.starter.executionsOf(wid(id))); n != 1 {
			t.Errorf("%s: %d executions, want 1", id, n)
		}
	}
	if n := len(e.dlqRecords()); n != 0 {
		t.Errorf("%d dead letters, want 0", n)
	}
}

// A settler that fell behind reads the undecided polls waiting for it
// together, two at most, in poll order; a decided poll waiting behind, or
// one that reads a partition again at or below the first's records of
// it, is held for the next turn, never merged or passed.
func TestASettlerThatFellBehindReadsTheWaitingUndecidedPollsTogether(t *testing.T) {
	poll := func(offs ...int64) *claimBatch {
		b := &claimBatch{}
		for _, o := range offs {
			b.undecided = append(b.undecided, polled{kr: &kgo.Record{Topic: testTopic, Partition: 0, Offset: o}})
		}
		return b
	}
	offsets := func(b *claimBatch) []int64 {
		var out []int64
		for _, p := range b.undecided {
			out = append(out, p.kr.Offset)
		}
		return out
	}
	q := make(chan *claimBatch, 3)
	q <- poll(3, 4)
	q <- poll(5)
	got, held := gatherUndecided(poll(1, 2), q)
	if fmt.Sprint(offsets(got)) != "[1 2 3 4]" || held != nil || len(q) != 1 {
		t.Fatalf("gathered %v, held %v, %d left; want [1 2 3 4], none held, 1 left", offsets(got), held, len(q))
	}
	<-q
	decided := &claimBatch{intents: []decide.Intent{{Topic: testTopic, Offset: 9}}}
	q <- decided
	if got, held := gatherUndecided(poll(7), q); fmt.Sprint(offsets(got)) != "[7]" || held != decided {
		t.Fatalf("a decided poll behind: gathered %v, held %v; want [7] and the decided poll held", offsets(got), held)
	}
	again := poll(2, 3)
	q <- again
	if got, held := gatherUndecided(poll(1, 2), q); fmt.Sprint(offsets(got)) != "[1 2]" || held != again {
		t.Fatalf("a poll reading offset 2 again: gathered %v, held %v; want [1 2] and it held", offsets(got), held)
	}
	if got, held := gatherUndecided(poll(1), q); fmt.Sprint(offsets(got)) != "[1]" || held != nil {
		t.Fatalf("none waiting: gathered %v, held %v", offsets(got), held)
	}
}
