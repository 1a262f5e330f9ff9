package processor

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dedupio/dedup/connect/kafkasasl"
	"github.com/dedupio/dedup/processor/eventid"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
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
