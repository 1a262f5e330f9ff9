package processor

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
)

// txProducer is a transactional producer on the test cluster.
type txProducer struct {
	t  *testing.T
	cl *kgo.Client
}

func (e *testEnv) txProducer(id string) *txProducer {
	e.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.cluster.ListenAddrs()...), kgo.TransactionalID(id),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(cl.Close)
	return &txProducer{t: e.t, cl: cl}
}

// begin opens a transaction and writes events (partition, id) into it,
// flushed: they are in the log, the transaction is still open.
func (p *txProducer) begin(events ...txEvent) {
	p.t.Helper()
	if err := p.cl.BeginTransaction(); err != nil {
		p.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, ev := range events {
		if err := p.cl.ProduceSync(ctx, &kgo.Record{Topic: testTopic, Partition: ev.p, Value: value(ev.id, "v")}).FirstErr(); err != nil {
			p.t.Fatal(err)
		}
	}
}

// end commits or aborts the open transaction.
func (p *txProducer) end(commit bool) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
		p.t.Fatal(err)
	}
}

type txEvent struct {
	p  int32
	id string
}

// Transactional producers: with read_committed (the default) exactly the
// events of committed transactions start, never those of aborted ones nor
// of one still open, and once everything is processed every partition is
// committed to its end, past the last transaction marker (lag 0). With
// read_uncommitted the aborted events start too.
func TestTransactionalTopics(t *testing.T) {
	for _, level := range []string{IsolationReadCommitted, IsolationReadUncommitted} {
		t.Run(level, func(t *testing.T) {
			e := newTestEnv(t, 2, envOpt{})
			tx := e.txProducer("tx-" + level)
			tx.begin(txEvent{0, "c1"}, txEvent{1, "c2"})
			tx.end(true)
			tx.begin(txEvent{0, "a1"}, txEvent{1, "a2"})
			tx.end(false)
			e.produce(0, "plain", "v")
			tx.begin(txEvent{0, "c3"}, txEvent{1, "a3"})
			tx.end(false)
			tx.begin(txEvent{1, "c4"})
			tx.end(true)
			// Still open when the router polls.
			tx.begin(txEvent{0, "o1"}, txEvent{1, "o2"})

			cfg := e.config()
			cfg.IsolationLevel = level
			var reg *prometheus.Registry
			rn := e.startWith("r1", cfg, func(_ *Router, r *prometheus.Registry) { reg = r })
			committed := []string{"c1", "c2", "plain", "c4"}
			aborted := []string{"a1", "a2", "a3"}
			if level == IsolationReadCommitted {
				// c3 was aborted with a3 (the name says what it would have been).
				aborted = append(aborted, "c3")
			} else {
				committed = append(committed, aborted...)
				committed = append(committed, "c3", "o1", "o2")
				aborted = nil
			}
			eventually(t, 10*time.Second, func() bool {
				for _, id := range committed {
					if e.led.state(wid(id)) != stateStarted {
						return false
					}
				}
				return true
			}, func() string { return fmt.Sprintf("executions %v", e.starter.executionCounts()) })
			if level == IsolationReadCommitted {
				stays(t, 300*time.Millisecond, func() bool {
					return e.starter.callCount(wid("o1")) == 0 && e.starter.callCount(wid("o2")) == 0
				}, func() string { return "an event of a transaction still open was started" })
			}
			tx.end(true)
			if level == IsolationReadCommitted {
				committed = append(committed, "o1", "o2")
			}
			e.waitCommittedToEnd(10 * time.Second)
			for _, id := range committed {
				if n := len(e.starter.executionsOf(wid(id))); n != 1 {
					t.Errorf("committed event %s: %d executions, want 1", id, n)
				}
			}
			for _, id := range aborted {
				if n := e.starter.callCount(wid(id)); n != 0 {
					t.Errorf("aborted event %s: %d start calls, want 0", id, n)
				}
				if st := e.led.state(wid(id)); st != "" {
					t.Errorf("aborted event %s was claimed: ledger %q", id, st)
				}
			}
			// The lag each partition shows once the router measured it
			// after the last commit.
			eventually(t, 5*time.Second, func() bool {
				n, sum := lagOf(t, reg)
				return n == 2 && sum == 0
			}, func() string {
				n, sum := lagOf(t, reg)
				return fmt.Sprintf("dedup_consumer_lag: %d series summing to %v", n, sum)
			})
			if err := rn.stop(); err != nil {
				t.Fatalf("Run: %v", err)
			}
			if got := e.dlqReasons(); len(got) != 0 {
				t.Errorf("dead letters %v", got)
			}
		})
	}
}

// lagOf is how many dedup_consumer_lag series reg has, and their sum.
func lagOf(t *testing.T, reg *prometheus.Registry) (n int, sum float64) {
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "dedup_consumer_lag" {
			continue
		}
		for _, m := range mf.GetMetric() {
			n++
			sum += m.GetGauge().GetValue()
		}
	}
	return n, sum
}
