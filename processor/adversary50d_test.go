package processor

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/plugin/kprom"

	"github.com/dedupio/dedup/connect/kafkasasl"
	"github.com/dedupio/dedup/processor/eventid"
)

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
	defer func() { cancel(); <-done }()
	e.produce(0, "a", "v")
	eventually(t, 10*time.Second, func() bool { return e.led.state(wid("a")) == stateStarted },
		func() string { return "a never started" })
	time.Sleep(5 * cfg.LagInterval)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var kafka, lag bool
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), "kafka_") {
			kafka = true
		}
		if mf.GetName() == "dedup_consumer_lag" {
			lag = true
		}
	}
	if !kafka {
		t.Errorf("no kafka_* (kprom) metric in the registry while the router runs")
	}
	if !lag {
		t.Errorf("no dedup_consumer_lag in the registry while the router runs")
	}
}

// Adversary 50d (a, revoke cut by the stop; holds on the group's state):
// a router stopped while a rebalance's revoke waits for a held start still
// commits, when Run returns, what finished before the stop on the
// partition it keeps. Observed: the final commit IS cut ("offset commit
// failed ... context deadline exceeded" at deadline - reserve/4), but its
// OffsetCommit was already sent and the coordinator applies it; a margin
// of about 50 ms at 200 ms round trips. Since
// 9f9039f the revoke in progress waits for its records until drainBy (the
// drain's end) and then commits under commitMu: the final commit, whose
// share of the reserve (deadline - reserve/4) is sized for one commit's
// two round trips of a 200 ms coordinator, now queues behind the revoke's
// two round trips, started at that same drainBy, and is cut.
// p0 and p1 each have a finished record (a0, a1) and one held in Temporal
// (h0, h1); another member joins and takes one of them.
func TestAStopDuringARevokeStillCommitsTheKeptPartitionsFinishedPrefix(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 2, envOpt{})
	cfg := e.config()
	cfg.DrainTimeout = minDrainTimeout
	cfg.RevokeTimeout = DefaultConfig().RevokeTimeout
	cfg.CommitInterval = time.Hour // only the revoke and the final commit commit
	var slow atomic.Bool
	e.slowCoordinatorFrom(&slow)
	rel0 := e.starter.block(wid("h0"))
	rel1 := e.starter.block(wid("h1"))
	defer rel0()
	defer rel1()
	e.produce(0, "a0", "v")
	e.produce(0, "h0", "v")
	e.produce(1, "a1", "v")
	e.produce(1, "h1", "v")
	rn := e.start("r1", cfg)
	eventually(t, 10*time.Second, func() bool {
		return e.led.state(wid("a0")) == stateStarted && e.led.state(wid("a1")) == stateStarted &&
			e.starter.heldCount(wid("h0")) == 1 && e.starter.heldCount(wid("h1")) == 1
	}, func() string { return "a0, a1 not marked or h0, h1 not held" })
	other := e.otherMember()
	defer other.Close()
	moved := int32(-1)
	eventually(t, 10*time.Second, func() bool {
		rn.r.commits.mu.Lock()
		defer rn.r.commits.mu.Unlock()
		for tp, p := range rn.r.commits.parts {
			if p.revoking {
				moved = tp.partition
				return true
			}
		}
		return false
	}, func() string { return "no partition began its revoke" })
	kept := 1 - moved
	slow.Store(true)
	err := rn.stop()
	slow.Store(false)
	if err != nil {
		t.Errorf("Run: %v", err)
	}
	c := e.committed()
	t.Logf("Run took %v; committed %v (moved p%d, kept p%d)", rn.took, c, moved, kept)
	if c[kept] != 1 {
		t.Errorf("kept partition %d: committed %d when Run returned, want 1: a%d was started and marked before the stop (the revoke of p%d, cut by the stop, committed first)",
			kept, c[kept], kept, moved)
	}
	if c[moved] != 1 {
		t.Errorf("revoked partition %d: committed %d, want 1 (a%d finished before the revoke)", moved, c[moved], moved)
	}
}

// Adversary 50d (b, claimer conflict path; holds): a router stopped while
// the dead letter of a conflict (the same workflow ID claimed with another
// payload, written by the claimer under the poll's context) is held by the
// broker returns within drain_timeout, and neither commits past the
// conflicting record nor records its dead letter as written: produceSync
// returning at the stop fails the record, it does not end it ok.
func TestAStopWhileAConflictsDeadLetterIsHeldCommitsNothingPastIt(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 1, envOpt{})
	arm, held, release := e.holdKeyOnce(kmsg.Produce.Int16())
	defer release()
	cfg := e.config()
	cfg.DrainTimeout = minDrainTimeout
	e.produce(0, "x", "v1")
	e.produce(0, "x", "v2") // offset 1: a conflict
	arm()                   // every Produce from now on is the router's: its dead letters
	rn := e.start("r1", cfg)
	eventually(t, 10*time.Second, held.Load, func() string { return "the conflict's dead letter Produce never reached the broker" })
	eventually(t, 10*time.Second, func() bool { return e.led.state(wid("x")) == stateStarted }, func() string { return "x/v1 not started" })
	time.Sleep(50 * time.Millisecond)
	err := rn.stop()
	if err != nil {
		t.Errorf("Run: %v", err)
	}
	if rn.took > cfg.DrainTimeout+time.Second {
		t.Errorf("Run returned %v after the stop; want within drain_timeout (%v) + 1s", rn.took, cfg.DrainTimeout)
	}
	c := e.committed()[0]
	rec := e.dlq.recorded()
	t.Logf("Run took %v; committed %d; dead letters recorded %d", rn.took, c, len(rec))
	if c > 1 {
		t.Errorf("committed %d past the conflict at offset 1 whose dead letter the broker never acknowledged", c)
	}
	if len(rec) != 0 {
		t.Errorf("dead letter recorded as written though its Produce was not acknowledged: %+v", rec)
	}
	release()
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

// Adversary 50d (a, zombie commit; holds): a revoke's OffsetCommit that
// the coordinator holds past the stop is cut at the shutdown's deadline
// (untilShutdown) but stays at the broker. Once the other member owns the
// partition and committed past it, the held commit, answered late, must
// not move the group's offset back.
func TestARevokesCommitCutByTheStopDoesNotMoveTheNewOwnersOffsetBack(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 2, envOpt{})
	arm, held, release := e.holdKeyOnce(kmsg.OffsetCommit.Int16())
	defer release()
	cfg := e.config()
	cfg.DrainTimeout = minDrainTimeout
	cfg.CommitInterval = time.Hour // only the revoke and the final commit commit
	e.produce(0, "a", "v")
	e.produce(1, "b", "v")
	rn := e.start("r1", cfg)
	eventually(t, 10*time.Second, func() bool {
		return e.led.state(wid("a")) == stateStarted && e.led.state(wid("b")) == stateStarted
	}, func() string { return "a and b not marked" })
	arm()
	other := e.otherMember()
	defer other.Close()
	eventually(t, 10*time.Second, held.Load, func() string { return "no revoke's OffsetCommit reached the coordinator" })
	if err := rn.stop(); err != nil {
		t.Errorf("Run: %v", err)
	}
	// The other member now takes both partitions, reads them to their
	// end (2 more records each) and commits.
	e.produce(0, "c", "v")
	e.produce(1, "d", "v")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	seen := map[int32]int64{}
	for (seen[0] < 1 || seen[1] < 1) && ctx.Err() == nil {
		fs := other.PollFetches(ctx)
		fs.EachRecord(func(r *kgo.Record) { seen[r.Partition] = max(seen[r.Partition], r.Offset) })
	}
	if ctx.Err() != nil {
		t.Fatalf("the other member never read both partitions to their end: %v", seen)
	}
	if err := other.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatalf("other's commit: %v", err)
	}
	before := e.committed()
	release() // the held revoke's OffsetCommit is answered now
	time.Sleep(500 * time.Millisecond)
	after := e.committed()
	t.Logf("Run took %v; committed by the new owner %v, after the held commit's release %v", rn.took, before, after)
	for p, c := range before {
		if after[p] < c {
			t.Errorf("partition %d: committed offset moved back from %d to %d by the router's held revoke commit", p, c, after[p])
		}
	}
}

// Adversary 50d (d, lag client's SASL; holds): against a cluster that
// takes SASL only, the lag watch's own client logs in with the config's
// SASL as the router's does, and dedup_consumer_lag says how far the
// committed offset is behind: 3 records, the 2nd held in Temporal, so 2.
func TestTheLagWatchsOwnClientLogsInWithTheConfigsSASL(t *testing.T) {
	waitsOnTimers(t)
	const user, pass = "lagger", "lagger-secret-0123"
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.EnableSASL(), kfake.Superuser("PLAIN", user, pass),
		kfake.SeedTopics(1, testTopic, testTopic+".dlq"), kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.SASL(plain.Auth{User: user, Pass: pass}.AsMechanism()))
	if err != nil {
		c.Close()
		t.Fatal(err)
	}
	dec, err := eventid.NewDecoder(eventid.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	e := &testEnv{t: t, cluster: c, group: "dedup-test", led: newFakeLedger(), dlq: newFakeDeadLetterLog(),
		starter: newFakeStarter(), cl: cl, adm: kadm.NewClient(cl), dec: dec}
	t.Cleanup(e.close)
	release := e.starter.block(wid("b"))
	defer release()
	e.produce(0, "a", "v")
	e.produce(0, "b", "v")
	e.produce(0, "c", "v")
	cfg := e.config()
	cfg.SASL = kafkasasl.Config{Mechanism: "PLAIN", Username: user, Password: pass}
	var reg *prometheus.Registry
	rn := e.startWith("r1", cfg, func(_ *Router, r *prometheus.Registry) { reg = r })
	eventually(t, 10*time.Second, func() bool { return e.committed()[0] == 1 }, func() string { return "a not committed" })
	eventually(t, 5*time.Second, func() bool { n, sum := lagOf(t, reg); return n == 1 && sum == 2 }, func() string {
		n, sum := lagOf(t, reg)
		return fmt.Sprintf("dedup_consumer_lag: %d series summing to %v, want 1 at 2", n, sum)
	})
	release()
	if err := rn.stop(); err != nil {
		t.Errorf("Run: %v", err)
	}
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
