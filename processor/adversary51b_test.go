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

	"github.com/dedupio/dedup/connect/clienttls"
	"github.com/dedupio/dedup/connect/kafkasasl"
	"github.com/dedupio/dedup/internal/testsupport/testpki"
	"github.com/dedupio/dedup/processor/eventid"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// lostOf is dedup_records_lost_total{topic=testTopic} of rn's router.
func lostOf(t *testing.T, rn *runner) float64 {
	t.Helper()
	var m dto.Metric
	if err := rn.r.m.lost.WithLabelValues(testTopic).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// Adversary 51b: under kafka.reset_offset latest, a group whose committed
// offset fell behind the log start resumes at the log end, skipping the
// backlog that retention had not deleted too. The runbook ("lag past the
// topic's retention") says: "at the log end under latest (which skips the
// backlog too); the skipped range is logged at error level with its
// offsets and counted in dedup_records_lost_total{topic}". Committed at 3,
// 3..7 produced, 3..5 deleted by retention, resumed at 8: the skipped
// range is 3..7, five records, none of them ever started.
func TestAResetToLatestCountsTheWholeSkippedBacklogAsLost(t *testing.T) {
	e := newTestEnv(t, 1, envOpt{})
	for _, id := range []string{"a", "b", "c"} {
		e.produce(0, id, "v")
	}
	cfg := e.config()
	cfg.ResetOffset = "latest"
	// The group read a..c (offsets 0..2) and committed 3 (by hand here).
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
	// The reset to latest lands at 8: seen as a fetch from 8.
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
	e.produce(0, "i", "v") // offset 8
	eventually(t, 10*time.Second, func() bool { return e.starter.callCount(wid("i")) == 1 }, func() string { return "i not started" })
	for _, id := range []string{"d", "e", "f", "g", "h"} {
		if n := e.starter.callCount(wid(id)); n != 0 {
			t.Fatalf("%s started %d times; the scenario expects it skipped", id, n)
		}
	}
	eventually(t, 5*time.Second, func() bool { return lostOf(t, rn) == 5 }, func() string {
		return fmt.Sprintf("dedup_records_lost_total %v, want 5: offsets 3..7 were skipped by the reset to latest (3..5 deleted by retention, 6..7 still in the log), none read", lostOf(t, rn))
	})
	if err := rn.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// Adversary 51b (holds): a router stopped while a start is slow (b, held in
// Temporal past the drain) still commits, when Run returns, what finished
// before the stop (a), with a broker slow to answer the client telemetry
// push (KIP-714; kfake subscribes every client). The lag watch's own
// client is closed inside loops.Wait, before the final commit and outside
// its deadline: kgo's Close sends a terminating PushTelemetry and waits up
// to 1 s for it, so the drain's share plus that second would leave the
// final commit nothing of drain_timeout. It holds: kgo's telemetry loop
// starts at a client's first produce or fetch metric, which the lag
// client (ListOffsets, Metadata) never records, so its Close sends no
// push; the router's own push (at its Close, in leave) comes after the
// final commit.
func TestAStopWhileATelemetryPushIsSlowStillCommitsWhatFinished(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 1, envOpt{})
	hold := make(chan struct{})
	var holdOnce sync.Once
	release := func() { holdOnce.Do(func() { close(hold) }) }
	defer release()
	var terminating atomic.Int32
	e.cluster.ControlKey(kmsg.PushTelemetry.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		e.cluster.KeepControl()
		if req.(*kmsg.PushTelemetryRequest).Terminating {
			terminating.Add(1)
			e.cluster.SleepControl(func() {
				select {
				case <-hold:
				case <-time.After(60 * time.Second):
				}
			})
		}
		return nil, nil, false
	})
	releaseB := e.starter.block(wid("b"))
	defer releaseB()
	cfg := e.config()
	cfg.DrainTimeout = minDrainTimeout
	cfg.CommitInterval = time.Hour // the final commit is the only one
	e.produce(0, "a", "v")         // offset 0
	e.produce(0, "b", "v")         // offset 1, held in Temporal
	rn := e.start("r1", cfg)
	eventually(t, 10*time.Second, func() bool { return e.led.state(wid("a")) == stateStarted }, func() string { return "a not marked" })
	eventually(t, 10*time.Second, func() bool { return e.starter.callCount(wid("b")) >= 1 }, func() string { return "b not started" })
	// Let the lag client subscribe to telemetry (it asks at its creation).
	time.Sleep(3 * e.config().LagInterval)
	err := rn.stop()
	if err != nil {
		t.Errorf("Run: %v", err)
	}
	if c := e.committed()[0]; c != 1 {
		t.Errorf("committed %d when Run returned (after %v; %d terminating telemetry pushes held), want 1: a was started and marked before the stop", c, rn.took, terminating.Load())
	}
	if rn.took > cfg.DrainTimeout+time.Second {
		t.Errorf("Run returned %v after cancel; want within drain_timeout (%v) + 1s", rn.took, cfg.DrainTimeout)
	}
	release()
	releaseB()
}

// Adversary 51b: records deleted by retention are counted lost once, not
// once per replica that sees the gap. r2 resumes past the gap (3..5
// deleted, log start 6) and counts it, but is stopped while g (offset 6,
// the record after the gap) is held in Temporal: nothing past the gap
// finished, so the group's offset stays at 3, and r3, resuming there,
// sees the same gap and counts the same three records again.
// dedup_records_lost_total summed over the replicas (the alert's
// increase() over a deploy) says 6 for 3 records, and two error logs name
// offsets 3..5.
func TestARetentionGapIsCountedOnceAcrossReplicas(t *testing.T) {
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
	releaseG := e.starter.block(wid("g"))
	defer releaseG()
	cfg := e.config()
	cfg.DrainTimeout = minDrainTimeout
	r2 := e.start("r2", cfg)
	eventually(t, 10*time.Second, func() bool { return e.starter.callCount(wid("g")) >= 1 }, func() string { return "g not started" })
	if err := r2.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	afterR2 := e.committed()[0]
	releaseG()
	r3 := e.start("r3", e.config())
	eventually(t, 10*time.Second, func() bool { return e.starter.callCount(wid("h")) >= 1 }, func() string { return "h not started by r3" })
	e.waitCommittedToEnd(10 * time.Second)
	// r3's gap check, if any, runs with its poll.
	stays(t, 3*e.config().LagInterval, func() bool { return lostOf(t, r2)+lostOf(t, r3) == 3 }, func() string {
		return fmt.Sprintf("records counted lost: r2 %v + r3 %v, want 3 in all (offsets 3..5, deleted once); the group's offset after r2 stopped: %d",
			lostOf(t, r2), lostOf(t, r3), afterR2)
	})
	if err := r3.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

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

// Adversary 51b (holds): against a broker that wants mutual TLS and SCRAM
// (kafka.tls with a CA and a client certificate, kafka.sasl SCRAM), the
// lag watch's own client (lagClient, read back from the router's) still
// reaches Kafka and measures: 3 records, the 2nd held in Temporal, so 2.
func TestTheLagIsMeasuredThroughAMutualTLSAndSCRAMCluster(t *testing.T) {
	waitsOnTimers(t)
	const user, pass = "lag-scram", "lag-scr4m-secret-0123"
	ca := testpki.NewCA(t, "kafka-ca")
	srv := ca.Server(t, "127.0.0.1", "localhost")
	cli := ca.Client(t, "dedup")
	dir := t.TempDir()
	caFile := testpki.Write(t, dir, "ca.pem", ca.CertPEM)
	certFile := testpki.Write(t, dir, "client.pem", cli.CertPEM)
	keyFile := testpki.Write(t, dir, "client-key.pem", cli.KeyPEM)
	c, err := kfake.NewCluster(kfake.NumBrokers(1),
		kfake.TLS(&tls.Config{Certificates: []tls.Certificate{srv.TLS(t)}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: ca.Pool()}),
		kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-256", user, pass),
		kfake.SeedTopics(1, testTopic, testTopic+".dlq"), kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.DialTLSConfig(&tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{cli.TLS(t)}, ServerName: "127.0.0.1"}),
		kgo.SASL(scram.Auth{User: user, Pass: pass}.AsSha256Mechanism()))
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
	cfg.TLS = clienttls.Config{CAFile: caFile, CertFile: certFile, KeyFile: keyFile}
	cfg.SASL = kafkasasl.Config{Mechanism: "SCRAM-SHA-256", Username: user, Password: pass}
	var reg *prometheus.Registry
	rn := e.startWith("r1", cfg, func(_ *Router, r *prometheus.Registry) { reg = r })
	eventually(t, 10*time.Second, func() bool { return e.committed()[0] == 1 }, func() string { return "a not committed" })
	eventually(t, 5*time.Second, func() bool { n, sum := lagOf(t, reg); return n == 1 && sum == 2 }, func() string {
		n, sum := lagOf(t, reg)
		return fmt.Sprintf("dedup_consumer_lag: %d series summing to %v, want 1 at 2", n, sum)
	})
	if rn.r.commits.lag.own.Load() == nil {
		t.Error("the lag was measured with the router's client, not a client of its own")
	}
	release()
	if err := rn.stop(); err != nil {
		t.Errorf("Run: %v", err)
	}
}

// trackedConn is a connection a countingDialer made; Close counts it closed.
type trackedConn struct {
	net.Conn
	open *atomic.Int32
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() { c.open.Add(-1) })
	return c.Conn.Close()
}

// Adversary 51b: every connection a router's client and its lag watch's
// client opened (both dial with the caller's dialer: lagClient reads it
// back) is closed once Run returned, whether the router is stopped at once
// after Run started (its lag client made, perhaps still connecting) or
// while it measures: none stays open (one kgo was dialing at the Close
// may outlive Run by milliseconds).
func TestRoutersStoppedWhileTheLagClientConnectsCloseEveryConnection(t *testing.T) {
	e := newTestEnv(t, 1, envOpt{})
	e.produce(0, "a", "v")
	cfg := e.config()
	cfg.LagInterval = 5 * time.Millisecond
	for i := range 8 {
		var open, dialed atomic.Int32
		var d net.Dialer
		dial := func(ctx context.Context, network, host string) (net.Conn, error) {
			c, err := d.DialContext(ctx, network, host)
			if err != nil {
				return nil, err
			}
			dialed.Add(1)
			open.Add(1)
			return &trackedConn{Conn: c, open: &open}, nil
		}
		r, err := New(cfg, Options{Ledger: e.led, DeadLetterLog: e.dlq, Starter: e.starter.as("r"), Log: testLogger("r"),
			KafkaOpts: []kgo.Opt{kgo.Dialer(dial), kgo.HeartbeatInterval(100 * time.Millisecond), kgo.MetadataMinAge(50 * time.Millisecond)}})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		if i%2 == 1 {
			eventually(t, 10*time.Second, func() bool { return r.commits.ready() && r.commits.lag.own.Load() != nil }, func() string { return "not joined" })
			time.Sleep(20 * time.Millisecond) // a few lag measures
		}
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Run %d: %v", i, err)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("Run %d did not return", i)
		}
		// A dial kgo started just before a Close completes after it and is
		// closed then (franz-go's, seen under -race): closed soon, not held.
		eventually(t, 5*time.Second, func() bool { return open.Load() == 0 }, func() string {
			return fmt.Sprintf("router %d: %d of the %d connections its clients dialed still open 5s after Run returned", i, open.Load(), dialed.Load())
		})
	}
}

// Adversary 51b (holds): with a broker whose fetches do not say where
// the log starts (Fetch v4, before KIP-107: LogStartOffset -1), a gap
// (an aborted transaction under read_committed) falls back to checkGap's
// ListOffsets of the log start; answered slowly (held 60 s), it goes on
// the lag watch's own client, not on the router's connection for
// ListOffsets, OffsetFetch and OffsetCommit: the final commit of what
// started before the stop still lands.
func TestAGapCheckOfABrokerThatDoesNotSayTheLogStartDoesNotHoldTheFinalCommit(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 1, envOpt{})
	hold := make(chan struct{})
	var holdOnce sync.Once
	release := func() { holdOnce.Do(func() { close(hold) }) }
	defer release()
	var armed atomic.Bool
	var earliest atomic.Int32
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
	var fetchVersions sync.Map
	e.cluster.ControlKey(kmsg.Fetch.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		e.cluster.KeepControl()
		fetchVersions.Store(req.GetVersion(), true)
		return nil, nil, false
	})
	cfg := e.config()
	cfg.DrainTimeout = minDrainTimeout
	cfg.CommitInterval = time.Hour // the final commit is the only one
	e.produce(0, "a", "v")         // offset 0
	v := kversion.Stable()
	v.SetMaxKeyVersion(kmsg.Fetch.Int16(), 4)
	r, err := New(cfg, Options{Ledger: e.led, DeadLetterLog: e.dlq, Starter: e.starter.as("r1"), Log: testLogger("r1"),
		KafkaOpts: []kgo.Opt{kgo.MaxVersions(v), kgo.HeartbeatInterval(100 * time.Millisecond), kgo.MetadataMinAge(50 * time.Millisecond)}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rn := &runner{t: t, r: r, cancel: cancel, done: make(chan error, 1)}
	go func() { rn.done <- r.Run(ctx) }()
	t.Cleanup(func() { _ = rn.stop() })
	eventually(t, 10*time.Second, func() bool { return e.led.state(wid("a")) == stateStarted }, func() string { return "a not marked" })
	armed.Store(true)
	tx := e.txProducer("gap4")
	tx.begin(txEvent{0, "aborted"}) // offset 1, skipped by read_committed
	tx.end(false)                   // offset 2: the abort marker
	e.produce(0, "b", "v")          // offset 3
	eventually(t, 10*time.Second, func() bool { return e.led.state(wid("b")) == stateStarted }, func() string { return "b not marked" })
	eventually(t, 10*time.Second, func() bool { return earliest.Load() >= 1 }, func() string {
		return "no ListOffsets of the log start after the gap: the fetch said where the log starts (Fetch v4 does not)"
	})
	if err := rn.stop(); err != nil {
		t.Errorf("Run: %v", err)
	}
	fetchVersions.Range(func(k, _ any) bool {
		if k.(int16) > 4 {
			t.Errorf("a Fetch v%d reached the broker; the test wants v4 at most", k)
		}
		return true
	})
	if rn.took > cfg.DrainTimeout+time.Second {
		t.Errorf("Run returned %v after cancel; want within drain_timeout (%v) + 1s", rn.took, cfg.DrainTimeout)
	}
	if c := e.committed()[0]; c != 4 {
		t.Errorf("committed %d when Run returned (after %v), want 4: a and b were started and marked before the stop", c, rn.took)
	}
	release()
}

// startOpts runs a router named name with extra KafkaOpts (as start does).
func (e *testEnv) startOpts(name string, cfg Config, extra ...kgo.Opt) *runner {
	e.t.Helper()
	r, err := New(cfg, Options{Ledger: e.led, DeadLetterLog: e.dlq, Starter: e.starter.as(name), Log: testLogger(name),
		KafkaOpts: append([]kgo.Opt{kgo.HeartbeatInterval(100 * time.Millisecond), kgo.MetadataMinAge(50 * time.Millisecond)}, extra...)})
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rn := &runner{t: e.t, r: r, cancel: cancel, done: make(chan error, 1)}
	go func() { rn.done <- r.Run(ctx) }()
	e.t.Cleanup(func() { _ = rn.stop() })
	return rn
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

// Adversary 51b (holds): a retention gap is counted once when kgo hands
// the fetch that shows it over several polls (max_poll_records 1): the
// later polls of the same fetch carry its log start but no gap.
func TestARetentionGapIsCountedOnceWhenItsFetchIsSplitOverPolls(t *testing.T) {
	e := newTestEnv(t, 1, envOpt{})
	for _, id := range []string{"a", "b", "c"} {
		e.produce(0, id, "v")
	}
	first := e.start("r1", e.config())
	e.waitCommittedToEnd(10 * time.Second)
	if err := first.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	ids := []string{"d", "e", "f", "g", "h", "i", "j", "k"} // offsets 3..10
	recs := make([]*kgo.Record, 0, len(ids))
	for _, id := range ids {
		recs = append(recs, &kgo.Record{Topic: testTopic, Partition: 0, Value: value(id, "v")})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := e.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.adm.DeleteRecords(ctx, kadm.Offsets{testTopic: {0: {Topic: testTopic, Partition: 0, At: 6}}}); err != nil {
		t.Fatal(err)
	}
	cfg := e.config()
	cfg.MaxPollRecords = 1
	rn := e.start("r2", cfg)
	e.waitCommittedToEnd(10 * time.Second)
	stays(t, 3*cfg.LagInterval, func() bool { return lostOf(t, rn) == 3 }, func() string {
		return fmt.Sprintf("%v records counted lost, want 3 (offsets 3..5)", lostOf(t, rn))
	})
	if err := rn.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// Adversary 51b (holds): a router whose lag watch's client cannot connect
// (every dial after the router's own connections hangs until its context
// ends: a broker that takes TCP but never completes the connection) still
// returns within drain_timeout + 1s of the stop and commits what started
// before it: the lag measure gives up with the stop and closing the lag
// client ends its dial.
func TestAStopWhileTheLagClientsDialHangsStillCommitsWhatStarted(t *testing.T) {
	waitsOnTimers(t)
	e := newTestEnv(t, 1, envOpt{})
	var armed atomic.Bool
	var hung atomic.Int32
	var d net.Dialer
	dial := func(ctx context.Context, network, host string) (net.Conn, error) {
		if armed.Load() {
			hung.Add(1)
			<-ctx.Done()
			return nil, ctx.Err()
		}
		return d.DialContext(ctx, network, host)
	}
	cfg := e.config()
	cfg.DrainTimeout = minDrainTimeout
	cfg.CommitInterval = time.Hour // the final commit is the only one
	cfg.LagInterval = time.Second  // the lag client's first dial comes after the router's
	e.produce(0, "a", "v")
	rn := e.startOpts("r1", cfg, kgo.Dialer(dial))
	eventually(t, 10*time.Second, func() bool { return e.led.state(wid("a")) == stateStarted }, func() string { return "a not marked" })
	if rn.r.commits.lag.own.Load() == nil {
		t.Fatal("the lag client was not made yet")
	}
	armed.Store(true)
	eventually(t, 10*time.Second, func() bool { return hung.Load() >= 1 }, func() string { return "no dial hung" })
	if err := rn.stop(); err != nil {
		t.Errorf("Run: %v", err)
	}
	if rn.took > cfg.DrainTimeout+time.Second {
		t.Errorf("Run returned %v after cancel; want within drain_timeout (%v) + 1s", rn.took, cfg.DrainTimeout)
	}
	if c := e.committed()[0]; c != 1 {
		t.Errorf("committed %d when Run returned (after %v; %d dials hung), want 1: a was started and marked before the stop", c, rn.took, hung.Load())
	}
}
