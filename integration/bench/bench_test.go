package bench

import (
	"bytes"
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/schemas"
)

// waitCommitted (a5bf45c) reads the group's offsets after each commit its
// consumer's client finished (commitSeen), with a 1 s safety net. Against
// kfake, with every read of the group's offsets slowed to 150ms (a loaded
// broker) so that commits land while the wait reads: it must not return
// before the last commit reaches the end; a last commit that lands during
// a read must be read again at once, not a second later (the second would
// add to the stage's elapsed time, its records/s); a commit before the
// wait began is seen by its first read; with no commit reaching the end
// it returns its error within the timeout and a safety-net period.
// (adversary 32)
func TestWaitCommittedSeesTheLastCommitAtOnce(t *testing.T) {
	const topic, group, n = "t", "g", 10
	const readDelay = 150 * time.Millisecond
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topic))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var slow atomic.Bool
	c.ControlKey(kmsg.OffsetFetch.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if slow.Load() {
			c.SleepControl(func() { time.Sleep(readDelay) })
		}
		return nil, nil, false
	})
	pcl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer pcl.Close()
	ctx := context.Background()
	for i := range n {
		if err := pcl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte{byte(i)}}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	e := &Env{adm: kadm.NewClient(pcl)}
	seen := newCommitSeen()
	ccl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.WithHooks(seen))
	if err != nil {
		t.Fatal(err)
	}
	defer ccl.Close()
	cadm := kadm.NewClient(ccl)
	commit := func(group string, at int64) time.Time {
		t.Helper()
		var o kadm.Offsets
		o.AddOffset(topic, 0, at, -1)
		if _, err := cadm.CommitOffsets(ctx, group, o); err != nil {
			t.Fatal(err)
		}
		return time.Now()
	}
	committed := func(group string) int64 {
		resp, err := e.adm.FetchOffsets(ctx, group)
		if err != nil {
			t.Fatal(err)
		}
		o, ok := resp.Lookup(topic, 0)
		if !ok {
			return -1
		}
		return o.At
	}

	t.Run("last commit during a read", func(t *testing.T) {
		slow.Store(true)
		defer slow.Store(false)
		type result struct {
			at    time.Time
			polls int
			err   error
		}
		done := make(chan result, 1)
		go func() {
			polls, err := e.waitCommitted(ctx, group, topic, 20*time.Second, seen.ch)
			done <- result{time.Now(), polls, err}
		}()
		time.Sleep(readDelay / 2) // the first read is under way
		commit(group, n/2)
		time.Sleep(readDelay + readDelay/2) // the read after that commit is under way
		last := commit(group, n)
		r := <-done
		slow.Store(false)
		if r.err != nil {
			t.Fatal(r.err)
		}
		if got := committed(group); got != n {
			t.Fatalf("returned with the group at %d, want %d", got, n)
		}
		after := r.at.Sub(last)
		t.Logf("returned %v after the last commit, %d reads", after.Round(time.Millisecond), r.polls)
		if after > 3*readDelay+200*time.Millisecond {
			t.Errorf("returned %v after the last commit (%d reads), want within a read or two (%v each), not the 1 s safety net",
				after.Round(time.Millisecond), r.polls, readDelay)
		}
	})
	t.Run("commit before the wait", func(t *testing.T) {
		commit(group+"-before", n)
		t0 := time.Now()
		polls, err := e.waitCommitted(ctx, group+"-before", topic, 20*time.Second, seen.ch)
		if err != nil || polls != 1 || time.Since(t0) > 500*time.Millisecond {
			t.Errorf("waitCommitted = %d reads, %v after %v; want one read, at once", polls, err, time.Since(t0))
		}
	})
	t.Run("never at the end", func(t *testing.T) {
		commit(group+"-short", n-1)
		const timeout = 1500 * time.Millisecond
		t0 := time.Now()
		_, err := e.waitCommitted(ctx, group+"-short", topic, timeout, seen.ch)
		took := time.Since(t0)
		if err == nil {
			t.Fatalf("waitCommitted returned no error with the group at %d of %d", n-1, n)
		}
		if took > timeout+time.Second+500*time.Millisecond {
			t.Errorf("waitCommitted returned its error after %v, want within its timeout (%v) and one safety-net period", took, timeout)
		}
	})
}

// The prefilled rows lie in the heap as a router's claims left them: each
// claim's rows by ledger key, the claims in the records' order, every
// intent once.
func TestPrefilledRowsLieAsTheClaimsInsertedThem(t *testing.T) {
	in := synthetic("heap", 2500)
	got := inHeapOrder(in, 1000)
	if len(got) != len(in) {
		t.Fatalf("%d rows of %d intents", len(got), len(in))
	}
	for at := 0; at < len(in); at += 1000 {
		end := min(at+1000, len(in))
		want := map[string]bool{}
		for _, x := range in[at:end] {
			want[x.WorkflowID] = true
		}
		for i := at; i < end; i++ {
			if !want[got[i].WorkflowID] {
				t.Fatalf("row %d, %s, is not of the claim of intents %d-%d", i, got[i].WorkflowID, at, end-1)
			}
			delete(want, got[i].WorkflowID)
			if i > at {
				a, b := schemas.LedgerKey(got[i-1].WorkflowID), schemas.LedgerKey(got[i].WorkflowID)
				if bytes.Compare(a[:], b[:]) > 0 {
					t.Fatalf("rows %d and %d of one claim are not in key order", i-1, i)
				}
			}
		}
	}
	if slices.EqualFunc(got, in, func(a, b decide.Intent) bool { return a.WorkflowID == b.WorkflowID }) {
		t.Fatal("the rows are in the records' order: the claims' key order was not applied")
	}
}
