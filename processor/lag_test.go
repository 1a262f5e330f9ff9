package processor

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dedupio/dedup/connect/kafkasasl"
	"github.com/dedupio/dedup/processor/eventid"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"
)

// Records that retention deleted before the group read them are counted
// (dedup_records_lost_total), not skipped in silence; the lag of the
// partition goes to 0 once the rest is committed, and its series goes
// away with the partition.
func TestRetentionGapIsCountedAndLagFollowsThePartition(t *testing.T) {
	e := newTestEnv(t, 1, envOpt{})
	for _, id := range []string{"a", "b", "c"} {
		e.produce(0, id, "v")
	}
	first := e.start("r1", e.config())
	e.waitCommittedToEnd(10 * time.Second)
	if err := first.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	// Offsets 3..7; retention then deletes everything before 6, so 3, 4
	// and 5 are never read.
	for _, id := range []string{"d", "e", "f", "g", "h"} {
		e.produce(0, id, "v")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := e.adm.DeleteRecords(ctx, kadm.Offsets{testTopic: {0: {Topic: testTopic, Partition: 0, At: 6}}}); err != nil {
		t.Fatal(err)
	}

	var reg *prometheus.Registry
	rn := e.startWith("r2", e.config(), func(_ *Router, r *prometheus.Registry) { reg = r })
	e.waitCommittedToEnd(10 * time.Second)
	lost := func() float64 {
		var m dto.Metric
		if err := rn.r.m.lost.WithLabelValues(testTopic).Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetCounter().GetValue()
	}
	// The gap check runs beside the poll loop.
	eventually(t, 5*time.Second, func() bool { return lost() == 3 },
		func() string { return fmt.Sprintf("%v records counted lost, want 3 (offsets 3..5)", lost()) })
	for _, id := range []string{"d", "e", "f"} {
		if n := e.starter.callCount(wid(id)); n != 0 {
			t.Errorf("%s was deleted before it was read, yet started %d times", id, n)
		}
	}
	for _, id := range []string{"g", "h"} {
		if n := e.starter.callCount(wid(id)); n != 1 {
			t.Errorf("%s: %d start calls, want 1", id, n)
		}
	}
	eventually(t, 5*time.Second, func() bool { n, sum := lagOf(t, reg); return n == 1 && sum == 0 },
		func() string {
			n, sum := lagOf(t, reg)
			return fmt.Sprintf("dedup_consumer_lag: %d series summing to %v, want 1 at 0", n, sum)
		})

	// Revoked (the committer's callback, called directly): the series goes,
	// and the lag loop does not bring it back for a partition not owned.
	rn.r.commits.revoked(t.Context(), nil, map[string][]int32{testTopic: {0}})
	stays(t, 3*e.config().LagInterval, func() bool { n, _ := lagOf(t, reg); return n == 0 },
		func() string {
			n, _ := lagOf(t, reg)
			return fmt.Sprintf("%d dedup_consumer_lag series after the revoke", n)
		})
	if err := rn.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// Adversary 50d (d, lag with SASL; holds): against a cluster that takes
// SASL only, the lag is measured with the config's SASL (it was measured
// on a client of its own in one version of this round, reverted), and
// dedup_consumer_lag says how far the committed offset is behind: 3
// records, the 2nd held in Temporal, so 2.
func TestTheLagIsMeasuredThroughASASLOnlyCluster(t *testing.T) {
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

// A router stopped just after a poll skipped offsets (read_committed over
// an aborted transaction) still commits, when Run returns, what it started
// before the stop, with a broker that would answer a ListOffsets of the
// log start slowly (held 60 s here): the gap is told apart by the log
// start its fetch answered with, so no such request sits ahead of the
// final commit on franz-go's one connection for ListOffsets, OffsetFetch
// and OffsetCommit (cxnNormal, answered in order). Adversary 50d showed
// the check's ListOffsets holding the commit until its deadline cut it
// (committed -1 after 2 s: a and b re-driven by the next owner).
func TestAStopWhileAGapIsSeenStillCommitsWhatStarted(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 1, envOpt{})
	hold := make(chan struct{})
	var holdOnce sync.Once
	release := func() { holdOnce.Do(func() { close(hold) }) }
	defer release()
	var armed atomic.Bool
	var earliest atomic.Int32 // ListOffsets of the log start, once armed
	e.cluster.ControlKey(kmsg.ListOffsets.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		e.cluster.KeepControl()
		start := false
		for _, tp := range req.(*kmsg.ListOffsetsRequest).Topics {
			for _, p := range tp.Partitions {
				start = start || p.Timestamp == -2
			}
		}
		if start && armed.Load() && earliest.Add(1) == 1 {
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
	eventually(t, 10*time.Second, func() bool { return e.led.state(wid("b")) == stateStarted }, func() string { return "b not marked" })
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
	if n := earliest.Load(); n != 0 {
		t.Errorf("%d ListOffsets of the log start after the gap; want none: the fetch that showed the gap said where the log starts", n)
	}
	var m dto.Metric
	if err := rn.r.m.lost.WithLabelValues(testTopic).Write(&m); err != nil {
		t.Fatal(err)
	}
	if v := m.GetCounter().GetValue(); v != 0 {
		t.Errorf("%v records counted lost; want 0: an aborted transaction is not retention", v)
	}
	release()
}

// The log start of a gap is the one of the fetch that brought the record
// after it: the partition's, in the fetch whose records hold that offset
// (a poll can hold two fetches of one partition, from before and after a
// leader moved), and -1 (ask Kafka) when no fetch of the poll holds it or
// the broker did not say.
func TestAGapsLogStartIsTheOneOfTheFetchThatBroughtTheRecordAfterIt(t *testing.T) {
	recs := func(offsets ...int64) []*kgo.Record {
		var out []*kgo.Record
		for _, o := range offsets {
			out = append(out, &kgo.Record{Offset: o})
		}
		return out
	}
	fetches := kgo.Fetches{
		{Topics: []kgo.FetchTopic{{Topic: "t", Partitions: []kgo.FetchPartition{
			{Partition: 0, LogStartOffset: 7, Records: recs(8, 9)},
			{Partition: 1, LogStartOffset: 3, Records: recs(4)},
			{Partition: 2, LogStartOffset: -1, Records: recs(5)},
		}}}},
		{Topics: []kgo.FetchTopic{
			{Topic: "u", Partitions: []kgo.FetchPartition{{Partition: 0, LogStartOffset: 1, Records: recs(12)}}},
			{Topic: "t", Partitions: []kgo.FetchPartition{{Partition: 0, LogStartOffset: 11, Records: recs(12, 13)}}},
		}},
	}
	for _, c := range []struct {
		tp     topicPartition
		offset int64
		want   int64
	}{
		{topicPartition{"t", 0}, 9, 7},
		{topicPartition{"t", 0}, 8, 7},
		{topicPartition{"t", 0}, 13, 11}, // the second fetch of t/0
		{topicPartition{"t", 0}, 10, -1}, // in no fetch's records
		{topicPartition{"t", 1}, 4, 3},
		{topicPartition{"t", 1}, 9, -1}, // t/0's offset, not t/1's
		{topicPartition{"t", 2}, 5, -1}, // the broker did not say
		{topicPartition{"u", 0}, 12, 1},
		{topicPartition{"v", 0}, 12, -1},
	} {
		if got := logStartOf(fetches, c.tp, c.offset); got != c.want {
			t.Errorf("log start of %s/%d at offset %d: %d, want %d", c.tp.topic, c.tp.partition, c.offset, got, c.want)
		}
	}
	if got := logStartOf(nil, topicPartition{"t", 0}, 9); got != -1 {
		t.Errorf("log start with no poll: %d, want -1", got)
	}
}

// Adversary 50 (b, lag): a router stopped while its lag measure's
// ListOffsets is answered slowly (one answer takes 2 s: a loaded broker)
// still commits, when Run returns, what it started before the stop. The
// lag measure's ListOffsets and the final commit's OffsetFetch and
// OffsetCommit share franz-go's normal connection to the broker (kgo
// broker.loadConnection: "list offsets stays on cxnNormal"), whose answers
// come in order: the shutdown cancels the measure, but the request is
// sent, and the final commit's requests wait behind it. Before v1.22.3
// the commit waited and landed late; now its deadline cuts it, and the
// next owner re-drives a. The lag watch's requests now go on a client of
// its own (lagClient), closed before the final commit.
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

// countNewClient counts the clients it was given to (kgo.HookNewClient).
type countNewClient struct{ n atomic.Int32 }

func (h *countNewClient) OnNewClient(*kgo.Client) { h.n.Add(1) }

// The lag watch's client (lagClient) reaches Kafka as the router's client
// does (its seeds, its dialer, its client ID, retries and timeouts, its
// TLS config) and runs none of its hooks: a caller's hooks run once per
// router (kprom registers its metrics on a client's creation).
func TestTheLagClientConnectsAsTheRoutersClientAndRunsNoneOfItsHooks(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var dials atomic.Int32
	var d net.Dialer
	hooks := &countNewClient{}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ClientID("router-7"), kgo.RequestRetries(3),
		kgo.ConnIdleTimeout(7*time.Second), kgo.WithHooks(hooks),
		kgo.Dialer(func(ctx context.Context, network, host string) (net.Conn, error) {
			dials.Add(1)
			return d.DialContext(ctx, network, host)
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	lc, err := lagClient(cl)
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	if n := hooks.n.Load(); n != 1 {
		t.Errorf("the router's hooks ran for %d clients, want 1 (the router's)", n)
	}
	if h, _ := lc.OptValue(kgo.WithHooks).([]kgo.Hook); len(h) != 0 {
		t.Errorf("the lag client has %d hooks, want none", len(h))
	}
	for _, o := range []struct {
		name string
		opt  any
	}{{"ClientID", kgo.ClientID}, {"RequestRetries", kgo.RequestRetries}, {"ConnIdleTimeout", kgo.ConnIdleTimeout}, {"SeedBrokers", kgo.SeedBrokers}} {
		if got, want := fmt.Sprint(lc.OptValues(o.opt)), fmt.Sprint(cl.OptValues(o.opt)); got != want {
			t.Errorf("lag client's %s: %s, want the router's %s", o.name, got, want)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	before := dials.Load()
	ends, err := kadm.NewClient(lc).ListEndOffsets(ctx, "t")
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		t.Fatalf("lag client's ListEndOffsets: %v", err)
	}
	if dials.Load() == before {
		t.Error("the lag client reached Kafka without the router's dialer")
	}

	// A client with a TLS config dials TLS: its lag client too (against
	// this plaintext broker, no answer).
	tcl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DialTLSConfig(&tls.Config{MinVersion: tls.VersionTLS12}),
		kgo.RequestRetries(0))
	if err != nil {
		t.Fatal(err)
	}
	defer tcl.Close()
	tlc, err := lagClient(tcl)
	if err != nil {
		t.Fatal(err)
	}
	defer tlc.Close()
	tctx, tcancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer tcancel()
	if _, err := kadm.NewClient(tlc).ListEndOffsets(tctx, "t"); err == nil {
		t.Error("a lag client of a TLS client answered by a plaintext broker: it did not dial TLS")
	}
}
