package integration

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedupio/dedup/internal/config"
	"github.com/dedupio/dedup/internal/demo/workload"
	"github.com/dedupio/dedup/processor"
	"github.com/dedupio/dedup/processor/decide"
)

// Transactional producers on the source topic, end to end: committed and
// aborted transactions interleaved with plain records on several
// partitions, and two transactions still open when the router polls (one
// committed later, one aborted later). Under read_committed (the default)
// exactly the committed events start, no aborted one is claimed, nothing
// behind an open transaction is read before it ends, and every partition's
// committed offset ends at its log end offset, past the last commit or
// abort marker (lag 0). Under read_uncommitted every record starts,
// aborted ones included.

// txnPartitions is the layout's partition count (p4 holds an aborted
// transaction only).
const txnPartitions = 5

// txnTopic is the layout written to one env's topic.
type txnTopic struct {
	e *env
	// committed: plain records and records of committed transactions,
	// settled before the router starts; aborted: records of transactions
	// aborted before the router starts.
	committed, aborted []string
	// openCommit and openAbort are the records of the two transactions left
	// open (their producers end them with commitOpen); behind are plain
	// records written after them on their partitions.
	openCommit, openAbort, behind []string
	// held is the first offset of each open transaction, by partition.
	held   map[int32]int64
	oc, oa *kgo.Client
}

func (x *txnTopic) wid(id string) string { return decide.WorkflowID("order-confirmation", id) }

// txnProducer is a transactional client of the env's topic.
func (e *env) txnProducer(name string) *kgo.Client {
	e.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(stack.Brokers()...), kgo.TransactionalID(e.topic+"-"+name),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.TransactionTimeout(5*time.Minute))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(cl.Close)
	return cl
}

// writeTxnTopic writes the layout, in this order (P = plain, C = committed
// transaction, A = aborted, O = open):
//
//	p0: P, C1 C1, A2 A2, P, C3            (ends with a commit marker)
//	p1: C1 C1, A2, A4 A4                  (ends with an abort marker)
//	p2: P P, C1, O(commit later) x2, P    (the last P is behind the open transaction)
//	p3: C3 C3, O(abort later) x2, P       (likewise)
//	p4: A2 A2                             (nothing but an aborted transaction)
func (e *env) writeTxnTopic() *txnTopic {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	x := &txnTopic{e: e, held: map[int32]int64{}}
	n := 0
	recs := func(ids *[]string, parts ...int32) []*kgo.Record {
		var out []*kgo.Record
		for _, p := range parts {
			n++
			id := fmt.Sprintf("%s-%d", e.name, n)
			*ids = append(*ids, id)
			out = append(out, &kgo.Record{Topic: e.topic, Partition: p, Key: []byte(id), Value: cloudEvent(id, workload.TypeOrder, id)})
		}
		return out
	}
	plain := func(ids *[]string, parts ...int32) {
		if err := e.kcl.ProduceSync(ctx, recs(ids, parts...)...).FirstErr(); err != nil {
			e.t.Fatal(err)
		}
	}
	txn := func(cl *kgo.Client, ids *[]string, parts ...int32) kgo.ProduceResults {
		if err := cl.BeginTransaction(); err != nil {
			e.t.Fatal(err)
		}
		res := cl.ProduceSync(ctx, recs(ids, parts...)...)
		if err := res.FirstErr(); err != nil {
			e.t.Fatal(err)
		}
		return res
	}
	end := func(cl *kgo.Client, commit kgo.TransactionEndTry) {
		if err := cl.EndTransaction(ctx, commit); err != nil {
			e.t.Fatal(err)
		}
	}
	tx := e.txnProducer("settled")
	plain(&x.committed, 0, 2, 2)
	txn(tx, &x.committed, 0, 0, 1, 1, 2)
	end(tx, kgo.TryCommit)
	txn(tx, &x.aborted, 0, 0, 1, 4, 4)
	end(tx, kgo.TryAbort)
	plain(&x.committed, 0)
	txn(tx, &x.committed, 0, 3, 3)
	end(tx, kgo.TryCommit)
	txn(tx, &x.aborted, 1, 1)
	end(tx, kgo.TryAbort)
	x.oc, x.oa = e.txnProducer("open-commit"), e.txnProducer("open-abort")
	for _, r := range txn(x.oc, &x.openCommit, 2, 2) {
		if _, ok := x.held[2]; !ok {
			x.held[2] = r.Record.Offset
		}
	}
	for _, r := range txn(x.oa, &x.openAbort, 3, 3) {
		if _, ok := x.held[3]; !ok {
			x.held[3] = r.Record.Offset
		}
	}
	plain(&x.behind, 2, 3)
	return x
}

// endOpen commits the first open transaction and aborts the second.
func (x *txnTopic) endOpen() {
	x.e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := x.oc.EndTransaction(ctx, kgo.TryCommit); err != nil {
		x.e.t.Fatal(err)
	}
	if err := x.oa.EndTransaction(ctx, kgo.TryAbort); err != nil {
		x.e.t.Fatal(err)
	}
}

// txnConfig is the env's router config for the layout: lag measured every
// half second.
func (e *env) txnConfig(isolation string) config.Config {
	cfg := e.config()
	cfg.Kafka.IsolationLevel = isolation
	cfg.Kafka.LagInterval = 500 * time.Millisecond
	return cfg
}

// checkRuns checks that each ID in started has one execution and a started
// ledger row, and each in never has none and no ledger row at all.
func (x *txnTopic) checkRuns(what string, execs map[string]int, started, never []string) {
	x.e.t.Helper()
	for _, id := range started {
		if n := execs[x.wid(id)]; n != 1 {
			x.e.t.Errorf("%s: %s has %d executions, want 1", what, x.wid(id), n)
		}
		if s := x.e.ledgerState(x.wid(id)); s != "started" {
			x.e.t.Errorf("%s: %s ledger row %q, want started", what, x.wid(id), s)
		}
	}
	for _, id := range never {
		if n := execs[x.wid(id)]; n != 0 {
			x.e.t.Errorf("%s: %s has %d executions, want 0", what, x.wid(id), n)
		}
		if s := x.e.ledgerState(x.wid(id)); s != "" {
			x.e.t.Errorf("%s: %s has a ledger row (%s), want none: it was claimed", what, x.wid(id), s)
		}
	}
}

// committedOffsets is the group's committed offset per partition (-1 none).
func (e *env) committedOffsets() map[int32]int64 {
	e.t.Helper()
	resp, err := e.adm.FetchOffsets(context.Background(), e.group)
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[int32]int64{}
	for p := int32(0); p < txnPartitions; p++ {
		out[p] = -1
		if o, ok := resp.Lookup(e.topic, p); ok && o.Err == nil {
			out[p] = o.At
		}
	}
	return out
}

// checkAtEnd waits for the group's committed offsets to reach the end
// offsets, and then for the router's dedup_consumer_lag to be 0 for every
// partition.
func (x *txnTopic) checkAtEnd(p *proc) {
	x.e.t.Helper()
	var state string
	if !eventually(20*time.Second, func() bool { var ok bool; ok, state = x.e.committedAtEnd(); return ok }) {
		x.e.t.Errorf("committed offsets (committed/end per partition) did not reach the end offsets in 20s: %s", state)
	}
	var lag map[string]float64
	ok := eventually(10*time.Second, func() bool {
		lag = p.gauges("dedup_consumer_lag", "partition")
		if len(lag) != txnPartitions {
			return false
		}
		for _, v := range lag {
			if v != 0 {
				return false
			}
		}
		return true
	})
	if !ok {
		x.e.t.Errorf("dedup_consumer_lag by partition %v, want 0 for each of the %d partitions", lag, txnPartitions)
	}
}

// TestTransactionalTopicReadCommitted: the default isolation level.
func TestTransactionalTopicReadCommitted(t *testing.T) {
	e := newEnv(t, txnPartitions)
	x := e.writeTxnTopic()
	began := time.Now()
	p := e.spawn("router", e.txnConfig(processor.IsolationReadCommitted))

	// 1. Everything settled is read: the committed records start, the
	// aborted ones are never claimed; nothing of the open transactions, and
	// nothing behind them, is read while they are open.
	e.executions(len(x.committed)) // waits for the committed records' workflows; read again below
	if !eventually(30*time.Second, func() bool {
		return p.metric("dedup_records_total", "", "") >= float64(len(x.committed))
	}) {
		t.Fatalf("the router read %v records, want %d", p.metric("dedup_records_total", "", ""), len(x.committed))
	}
	time.Sleep(3 * time.Second) // several polls with the transactions open
	execs, _ := e.listExecutions()
	unread := slices.Concat(x.openCommit, x.openAbort, x.behind)
	x.checkRuns("transactions open", execs, x.committed, slices.Concat(x.aborted, unread))
	if len(execs) != len(x.committed) {
		t.Errorf("transactions open: executions of %d workflow IDs, want %d", len(execs), len(x.committed))
	}
	if n := p.metric("dedup_records_total", "", ""); n != float64(len(x.committed)) {
		t.Errorf("transactions open: the router read %v records, want %d (the settled committed ones)", n, len(x.committed))
	}
	// The committed offsets stop exactly at the open transactions (the
	// last stable offset: all before is finished, markers included), and
	// are at the end elsewhere.
	ends, err := e.adm.ListEndOffsets(context.Background(), e.topic)
	if err != nil {
		t.Fatal(err)
	}
	wantHeld := map[int32]int64{}
	for part := int32(0); part < txnPartitions; part++ {
		o, _ := ends.Lookup(e.topic, part)
		wantHeld[part] = o.Offset
		if first, ok := x.held[part]; ok {
			wantHeld[part] = first
		}
	}
	var held map[int32]int64
	if !eventually(10*time.Second, func() bool { held = e.committedOffsets(); return fmt.Sprint(held) == fmt.Sprint(wantHeld) }) {
		t.Errorf("transactions open: committed offsets %v, want %v (the open transactions' first records, the end offsets elsewhere)", held, wantHeld)
	}

	// 2. The open transactions end: the committed one's records and the
	// records behind both start; the aborted one's never.
	x.endOpen()
	want := slices.Concat(x.committed, x.openCommit, x.behind)
	execs = e.executions(len(want))
	x.checkRuns("all transactions ended", execs, want, slices.Concat(x.aborted, x.openAbort))
	total := 0
	for _, n := range execs {
		total += n
	}
	if total != len(want) || len(execs) != len(want) {
		t.Errorf("Temporal has %d executions of %d workflow IDs, want %d of %d", total, len(execs), len(want), len(want))
	}
	if c, err := e.led.Count(context.Background()); err != nil || c.Started != int64(len(want)) || c.Pending != 0 {
		t.Errorf("ledger %+v (%v), want %d started, 0 pending", c, err, len(want))
	}
	// The offsets an aborted transaction or a marker takes are a jump in
	// the offsets read, not records that retention deleted.
	if n := p.metric("dedup_records_lost_total", "", ""); n != 0 {
		t.Errorf("dedup_records_lost_total %v, want 0", n)
	}

	// 3. Every partition's committed offset is past its last marker.
	x.checkAtEnd(p)
	p.stop(t)
	if ok, state := e.committedAtEnd(); !ok {
		t.Errorf("committed offsets after the router stopped (committed/end): %s", state)
	}
	t.Logf("read_committed: %d started, %d aborted never claimed, in %s", len(want), len(x.aborted)+len(x.openAbort), time.Since(began).Round(time.Millisecond))
}

// TestTransactionalTopicReadUncommitted: kafka.isolation_level
// read_uncommitted reads every record as it is written, those of aborted
// and of open transactions included, and starts them.
func TestTransactionalTopicReadUncommitted(t *testing.T) {
	e := newEnv(t, txnPartitions)
	x := e.writeTxnTopic()
	began := time.Now()
	p := e.spawn("router", e.txnConfig(processor.IsolationReadUncommitted))
	all := slices.Concat(x.committed, x.aborted, x.openCommit, x.openAbort, x.behind)
	// Everything starts while two transactions are still open.
	execs := e.executions(len(all))
	x.checkRuns("transactions open", execs, all, nil)
	x.endOpen()
	time.Sleep(2 * time.Second)
	execs, total := e.listExecutions()
	x.checkRuns("all transactions ended", execs, all, nil)
	if total != len(all) || len(execs) != len(all) {
		t.Errorf("Temporal has %d executions of %d workflow IDs, want %d of %d", total, len(execs), len(all), len(all))
	}
	x.checkAtEnd(p)
	p.stop(t)
	if ok, state := e.committedAtEnd(); !ok {
		t.Errorf("committed offsets after the router stopped (committed/end): %s", state)
	}
	t.Logf("read_uncommitted: %d started, %d of them aborted, in %s", len(all), len(x.aborted)+len(x.openAbort), time.Since(began).Round(time.Millisecond))
}

var sampleLabel = regexp.MustCompile(`(\w+)="([^"]*)"`)

// gauges is the process's samples of metric name by the value of label.
func (p *proc) gauges(name, label string) map[string]float64 {
	out := map[string]float64{}
	c := http.Client{Timeout: 4 * time.Second}
	resp, err := c.Get("http://" + p.admin + "/metrics")
	if err != nil {
		return out
	}
	defer func() { _ = resp.Body.Close() }()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			continue
		}
		for _, m := range sampleLabel.FindAllStringSubmatch(line, -1) {
			if m[1] == label {
				out[m[2]] = v
			}
		}
	}
	return out
}
