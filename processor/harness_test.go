package processor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"

	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/processor/eventid"
	"github.com/dedupio/dedup/schemas"
)

// Every test closes what it opened (routers, clients, the fake cluster):
// no goroutine may outlive the package's tests.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const (
	testTopic = "events"
	testRoute = "r1"
	testType  = "order.created"
)

// wid is the workflow ID the test route gives event id.
func wid(id string) string { return decide.WorkflowID(testRoute, id) }

// testEnv is one test's Kafka (kfake, one broker), ledger, dead-letter log
// and Temporal (fakes).
type testEnv struct {
	t       *testing.T
	cluster *kfake.Cluster
	group   string
	led     *fakeLedger
	dlq     *fakeDeadLetterLog
	starter *fakeStarter
	cl      *kgo.Client // producer and admin
	adm     *kadm.Client
	dec     *eventid.Decoder
	closeMu sync.Once
	asleep  atomic.Int64 // control functions in sleepControl
}

type envOpt struct {
	noDLQTopic bool // do not create the dead-letter topic
}

func newTestEnv(t *testing.T, partitions int32, o envOpt) *testEnv {
	t.Helper()
	topics := []string{testTopic}
	if !o.noDLQTopic {
		topics = append(topics, testTopic+".dlq")
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, topics...),
		kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
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
	return e
}

// close closes the producer and the cluster (once; also at cleanup). It
// first waits (up to 70 s: a held request's longest sleep and a margin)
// for the control functions asleep to wake: kfake closed with two asleep
// leaves one goroutine blocked forever on its control lock.
func (e *testEnv) close() {
	e.closeMu.Do(func() {
		e.cl.Close()
		for deadline := time.Now().Add(70 * time.Second); e.asleep.Load() > 0; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				e.t.Logf("closing the cluster with %d control functions asleep", e.asleep.Load())
				break
			}
		}
		e.cluster.Close()
	})
}

// sleepControl is the cluster's SleepControl, counted for close.
func (e *testEnv) sleepControl(wakeup func()) {
	e.asleep.Add(1)
	defer e.asleep.Add(-1)
	e.cluster.SleepControl(wakeup)
}

// config is a router config for this env with short timings.
func (e *testEnv) config() Config {
	cfg := DefaultConfig()
	cfg.Brokers = e.cluster.ListenAddrs()
	cfg.Group = e.group
	cfg.Topics = []string{testTopic}
	cfg.ResetOffset = "earliest"
	cfg.SessionTimeout = time.Second
	cfg.RebalanceTimeout = time.Second
	cfg.CommitInterval = 50 * time.Millisecond
	cfg.Starts.MarkInterval = 5 * time.Millisecond
	cfg.Retry.Initial = 5 * time.Millisecond
	cfg.Retry.Max = 50 * time.Millisecond
	cfg.RevokeTimeout = 200 * time.Millisecond
	cfg.DrainTimeout = 2 * time.Second
	cfg.LagInterval = 200 * time.Millisecond
	cfg.Starts.Concurrency = 4
	cfg.Routes = decide.Routes{{ID: testRoute, Match: decide.Match{Type: testType}, WorkflowType: "W", TaskQueue: "q"}}
	return cfg
}

// value is an event with ID id and payload v.
func value(id, v string) []byte {
	return fmt.Appendf(nil, `{"id":%q,"type":%q,"data":{"v":%q}}`, id, testType, v)
}

// hashOf is the payload hash the router computes for value(id, v).
func (e *testEnv) hashOf(id, v string) [32]byte {
	ev, err := e.dec.Decode(eventid.Record{Topic: testTopic, Value: value(id, v)})
	if err != nil {
		e.t.Fatal(err)
	}
	return ev.PayloadHash
}

// produce writes raw to partition p and returns its offset.
func (e *testEnv) produceRaw(p int32, raw []byte) int64 {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := e.cl.ProduceSync(ctx, &kgo.Record{Topic: testTopic, Partition: p, Value: raw}).First()
	if err != nil {
		e.t.Fatal(err)
	}
	return r.Offset
}

// produce writes event id with payload v to partition p.
func (e *testEnv) produce(p int32, id, v string) int64 { return e.produceRaw(p, value(id, v)) }

// committed is the group's committed offset per partition (-1: none).
func (e *testEnv) committed() map[int32]int64 {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := e.adm.FetchOffsets(ctx, e.group)
	if err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
		e.t.Fatal(err)
	}
	out := map[int32]int64{}
	for p := range e.ends() {
		out[p] = -1
		if o, ok := resp.Lookup(testTopic, p); err == nil && ok && o.Err == nil {
			out[p] = o.At
		}
	}
	return out
}

// ends is the end offset of every partition of the topic.
func (e *testEnv) ends() map[int32]int64 {
	return e.endsOf(testTopic)
}

func (e *testEnv) endsOf(topic string) map[int32]int64 {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	l, err := e.adm.ListEndOffsets(ctx, topic)
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[int32]int64{}
	l.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			e.t.Fatal(o.Err)
		}
		out[o.Partition] = o.Offset
	})
	return out
}

// atEnd reports whether every partition is committed to its end (an empty
// partition counts as at its end with no commit).
func (e *testEnv) atEnd() bool {
	ends, got := e.ends(), e.committed()
	for p, end := range ends {
		if got[p] != end && (end != 0 || got[p] != -1) {
			return false
		}
	}
	return true
}

func (e *testEnv) waitCommittedToEnd(within time.Duration) {
	e.t.Helper()
	eventually(e.t, within, e.atEnd, func() string {
		return fmt.Sprintf("committed %v, ends %v", e.committed(), e.ends())
	})
}

// dlqRecords reads every record of the dead-letter topic.
func (e *testEnv) dlqRecords() []*kgo.Record {
	e.t.Helper()
	dlq := testTopic + ".dlq"
	total := int64(0)
	for _, end := range e.endsOf(dlq) {
		total += end
	}
	if total == 0 {
		return nil
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.cluster.ListenAddrs()...), kgo.ConsumeTopics(dlq),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		e.t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []*kgo.Record
	for int64(len(out)) < total && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) { out = append(out, r) })
	}
	if int64(len(out)) < total {
		e.t.Fatalf("read %d of %d dead letters", len(out), total)
	}
	return out
}

// dlqReasons counts the dead-letter topic's records by reason header.
func (e *testEnv) dlqReasons() map[string]int {
	out := map[string]int{}
	for _, r := range e.dlqRecords() {
		reason := "<none>"
		for _, h := range r.Headers {
			if h.Key == schemas.HeaderDLQReason {
				reason = string(h.Value)
			}
		}
		out[reason]++
	}
	return out
}

// runner is one router running in the background.
type runner struct {
	t      *testing.T
	r      *Router
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
	took   time.Duration // from stop to Run's return
}

// start runs a router named name (the starter records who calls).
func (e *testEnv) start(name string, cfg Config) *runner {
	e.t.Helper()
	return e.startWith(name, cfg, nil)
}

// startWith is start with the router's registry, and a change to the
// router before it runs.
func (e *testEnv) startWith(name string, cfg Config, change func(*Router, *prometheus.Registry)) *runner {
	e.t.Helper()
	reg := prometheus.NewRegistry()
	applied := make(changeApplied)
	r, err := New(cfg, Options{Ledger: e.led, DeadLetterLog: e.dlq, Starter: e.starter.as(name), Registerer: reg, Log: testLogger(name), KafkaOpts: []kgo.Opt{
		kgo.HeartbeatInterval(100 * time.Millisecond), kgo.MetadataMinAge(50 * time.Millisecond), kgo.WithHooks(applied)}})
	if err != nil {
		e.t.Fatal(err)
	}
	func() {
		defer close(applied)
		if change != nil {
			change(r, reg)
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	rn := &runner{t: e.t, r: r, cancel: cancel, done: make(chan error, 1)}
	go func() { rn.done <- r.Run(ctx) }()
	e.t.Cleanup(func() { _ = rn.stop() }) // tests that care about Run's error call stop themselves
	return rn
}

// changeApplied holds the router's Kafka client at its first answer from
// a broker until startWith's change is applied (closed). New's client
// joins the group as soon as it is made, from its own goroutines, which
// call the router's callbacks (the committer's assigned, its own); change
// replaces some of them. Without the hold, on a loaded machine the client
// could be assigned partitions before change was applied, and what change
// wrote was a data race with what the callback read (CI's -race run saw
// one: TestARouterStoppedWhileDeadLetterMarksWaitOnTheirPartitionsBackoffReturnsInTime's
// own, read by assigned). Waiting on the channel orders change before
// every answer the client reads, and so before every callback.
type changeApplied chan struct{}

func (c changeApplied) OnBrokerRead(kgo.BrokerMetadata, int16, int, time.Duration, time.Duration, error) {
	<-c
}

// waitJoined waits until the router owns partitions.
func (rn *runner) waitJoined() {
	rn.t.Helper()
	eventually(rn.t, 10*time.Second, rn.r.commits.ready, func() string { return "router never joined the group" })
}

// stop cancels Run and returns its error (once; also at cleanup).
func (rn *runner) stop() error {
	rn.once.Do(func() {
		t0 := time.Now()
		rn.cancel()
		select {
		case rn.err = <-rn.done:
		case <-time.After(20 * time.Second):
			rn.err = fmt.Errorf("Run did not return within 20s of cancel")
			rn.t.Error(rn.err)
		}
		rn.took = time.Since(t0)
	})
	return rn.err
}

// waitersOf is how many copies wait on wid's start in flight, rechecks
// included (-1: none in flight).
func waitersOf(r *Router, wid string) int {
	r.starts.mu.Lock()
	defer r.starts.mu.Unlock()
	if j := r.starts.starting[wid]; j != nil {
		return len(j.waiters) + len(j.rechecks)
	}
	return -1
}

func testLogger(name string) *slog.Logger {
	if os.Getenv("ROUTER_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("router", name)
	}
	return slog.New(slog.DiscardHandler)
}

// eventually polls cond until it holds or within passes.
func eventually(t *testing.T, within time.Duration, cond func() bool, msg func() string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", within, msg())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// stays checks that cond keeps holding for d.
func stays(t *testing.T, d time.Duration, cond func() bool, msg func() string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if !cond() {
			t.Fatalf("stopped holding: %s", msg())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// holdFirstClaim holds the claimer in its first claim, after the
// statement, until release (idempotent; also called at the test's end):
// the polls behind it wait in its queue.
func (e *testEnv) holdFirstClaim() (release func()) {
	hold := make(chan struct{})
	var holdOnce, releaseOnce sync.Once
	release = func() { releaseOnce.Do(func() { close(hold) }) }
	e.t.Cleanup(release)
	e.led.setAfterClaim(func([]decide.Intent) { holdOnce.Do(func() { <-hold }) })
	return release
}

// owned is the partitions rn's committer holds an assignment of.
func (rn *runner) owned() map[int32]bool {
	rn.r.commits.mu.Lock()
	defer rn.r.commits.mu.Unlock()
	out := map[int32]bool{}
	for tp := range rn.r.commits.parts {
		out[tp.partition] = true
	}
	return out
}

// polled is the records rn polled (its records counter).
func (rn *runner) polled() float64 {
	var m dto.Metric
	if err := rn.r.m.records.Write(&m); err != nil {
		rn.t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// otherMember joins another member to e's group (quick to rebalance, no
// auto-commit), which takes partitions from the routers; the caller
// closes it to give them back.
func (e *testEnv) otherMember() *kgo.Client {
	e.t.Helper()
	other, err := kgo.NewClient(kgo.SeedBrokers(e.cluster.ListenAddrs()...), kgo.ConsumerGroup(e.group), kgo.ConsumeTopics(testTopic),
		kgo.Balancers(kgo.CooperativeStickyBalancer()), kgo.DisableAutoCommit(), kgo.SessionTimeout(time.Second),
		kgo.RebalanceTimeout(time.Second), kgo.HeartbeatInterval(100*time.Millisecond))
	if err != nil {
		e.t.Fatal(err)
	}
	return other
}

// ghostKeepsTaking makes a member the group dropped ("ghost") take
// partition p in the ledger before every claim (claims) or mark (!claims)
// that holds one of p's records, until stop; bumps counts its takes.
func (e *testEnv) ghostKeepsTaking(p int32, claims bool) (bumps *atomic.Int32, stop func()) {
	var taking atomic.Bool
	taking.Store(true)
	bumps = &atomic.Int32{}
	take := func(has bool) {
		if has && taking.Load() {
			bumps.Add(1)
			e.ghostOwn(p)
		}
	}
	e.led.mu.Lock()
	if claims {
		e.led.gate = func(intents []decide.Intent) bool {
			take(slices.ContainsFunc(intents, func(in decide.Intent) bool { return in.Partition == p }))
			return false
		}
	} else {
		e.led.markGate = func(ps []int32) { take(slices.Contains(ps, p)) }
	}
	e.led.mu.Unlock()
	return bumps, func() { taking.Store(false) }
}

// ghostOwnsBeforeClaims makes a member the group dropped ("ghost") take a
// partition in the ledger (a late Own: a new epoch) before a claim that
// holds its records, times[p] times for partition p, one partition a
// claim (the lowest still due). done reports whether every Own happened.
func (e *testEnv) ghostOwnsBeforeClaims(times map[int32]int) (done func() bool) {
	var mu sync.Mutex
	owned := map[int32]int{}
	e.led.mu.Lock()
	e.led.gate = func(intents []decide.Intent) bool {
		mu.Lock()
		defer mu.Unlock()
		has := map[int32]bool{}
		for _, in := range intents {
			has[in.Partition] = true
		}
		for _, p := range slices.Sorted(maps.Keys(times)) {
			if has[p] && owned[p] < times[p] {
				owned[p]++
				if _, err := e.led.Own(context.Background(), Ownership{Group: e.group, Member: "ghost", Confirmed: true,
					Parts: []PartitionRef{{testTopic, p}}}); err != nil {
					e.t.Error(err)
				}
				break
			}
		}
		return false
	}
	e.led.mu.Unlock()
	return func() bool {
		mu.Lock()
		defer mu.Unlock()
		return maps.Equal(owned, times)
	}
}

// pollOfCWaitsAndPartitionOneMoves is the start of the move-and-back
// scenarios: rn, held in its first claim (holdFirstClaim), claims h@0,
// and its poll of c@1 (value v) waits for the claimer; then another
// member joins and takes partition 1. It returns c's offset and the other
// member (close it to give partition 1 back).
func (e *testEnv) pollOfCWaitsAndPartitionOneMoves(rn *runner, v string) (offC int64, other *kgo.Client) {
	e.t.Helper()
	eventually(e.t, 10*time.Second, func() bool { return len(rn.owned()) == 2 }, func() string { return fmt.Sprintf("r1 owns %v", rn.owned()) })
	e.produce(0, "h", "v")
	eventually(e.t, 10*time.Second, func() bool { return len(e.led.claimLog()) == 1 }, func() string { return "h never claimed" })
	offC = e.produce(1, "c", v)
	eventually(e.t, 10*time.Second, func() bool { return rn.polled() == 2 }, func() string { return fmt.Sprintf("polled %v", rn.polled()) })
	time.Sleep(100 * time.Millisecond)
	other = e.otherMember()
	eventually(e.t, 10*time.Second, func() bool { o := rn.owned(); return len(o) == 1 && o[0] }, func() string {
		return fmt.Sprintf("r1 owns %v: want partition 1 moved to the other member", rn.owned())
	})
	return offC, other
}

// waitsOnTimers marks a test that spends seconds waiting (on the fence's
// bounds and backoffs, a slowed coordinator, a drain or revoke timeout)
// rather than computing: it runs in parallel with the others like it, up
// to make test's -parallel at once. Each has its own cluster, ledger,
// dead-letter log and Temporal fakes; a bound such a test asserts has
// the margin of a loaded machine.
func waitsOnTimers(t *testing.T) {
	t.Helper()
	t.Parallel()
}

// slowCoordinatorFrom makes the group coordinator answer OffsetFetch and
// OffsetCommit in shutdownCoordinatorRTT each once slow is set (as
// TestShutdownAtTheSmallestDrainTimeoutCommitsThroughASlowCoordinator).
func (e *testEnv) slowCoordinatorFrom(slow *atomic.Bool) {
	e.coordinatorSlowedBy(slow, shutdownCoordinatorRTT)
}

// coordinatorSlowedBy makes the group coordinator answer OffsetFetch and
// OffsetCommit in rtt each once slow is set.
func (e *testEnv) coordinatorSlowedBy(slow *atomic.Bool, rtt time.Duration) {
	for _, key := range []int16{kmsg.OffsetFetch.Int16(), kmsg.OffsetCommit.Int16()} {
		e.cluster.ControlKey(key, func(kmsg.Request) (kmsg.Response, error, bool) {
			e.cluster.KeepControl()
			if slow.Load() {
				e.sleepControl(func() { time.Sleep(rtt) })
			}
			return nil, nil, false
		})
	}
}

// holdKeyOnce holds the first request of key sent once armed, for 60 s or
// until release; held reports whether one was.
func (e *testEnv) holdKeyOnce(key int16) (arm func(), held *atomic.Bool, release func()) {
	hold := make(chan struct{})
	var holdOnce sync.Once
	release = func() { holdOnce.Do(func() { close(hold) }) }
	e.t.Cleanup(release)
	var armed atomic.Bool
	held = &atomic.Bool{}
	e.cluster.ControlKey(key, func(kmsg.Request) (kmsg.Response, error, bool) {
		e.cluster.KeepControl()
		if armed.Load() && !held.Swap(true) {
			e.sleepControl(func() {
				select {
				case <-hold:
				case <-time.After(60 * time.Second):
				}
			})
		}
		return nil, nil, false
	})
	return func() { armed.Store(true) }, held, release
}

// The env's close leaves no goroutine of the fake cluster behind when it
// closes the cluster while control functions sleep (a test ending with
// requests held at a slow coordinator): kfake's control goroutine, woken
// by the cluster's death, takes the control lock the dead run loop would
// have released, so a second one asleep waits for it forever.
func TestTheEnvsCloseLeavesNoControlFunctionAsleep(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	e := newTestEnv(t, 1, envOpt{})
	var slow atomic.Bool
	slow.Store(true)
	e.coordinatorSlowedBy(&slow, 3*time.Second)
	var wg sync.WaitGroup
	var cls []*kgo.Client
	for range 2 {
		cl, err := kgo.NewClient(kgo.SeedBrokers(e.cluster.ListenAddrs()...))
		if err != nil {
			t.Fatal(err)
		}
		cls = append(cls, cl)
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, _ = kadm.NewClient(cl).FetchOffsets(ctx, e.group)
		}()
	}
	// Both OffsetFetches asleep at the coordinator: each client dials, finds
	// the coordinator and sends it, which a fixed second left to a busy
	// machine's scheduler.
	eventually(t, 10*time.Second, func() bool { return e.asleep.Load() == 2 },
		func() string { return fmt.Sprintf("%d control functions asleep, want 2", e.asleep.Load()) })
	e.close()
	wg.Wait()
	for _, cl := range cls {
		cl.Close()
	}
	goleak.VerifyNone(t, ignore)
}
