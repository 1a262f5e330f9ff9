package processor

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedupio/dedup/processor/decide"
)

// ownDataStarter calls seen with each start request as the router makes
// it, then hands the env's starter a copy of its data: the fake keeps its
// requests, which would otherwise keep the records' bytes.
type ownDataStarter struct {
	Starter
	seen func(req decide.StartRequest)
}

func (s ownDataStarter) Start(ctx context.Context, req decide.StartRequest) (StartResult, error) {
	if s.seen != nil {
		s.seen(req)
	}
	req.Input.Data, req.Input.DataBase64 = bytes.Clone(req.Input.Data), bytes.Clone(req.Input.DataBase64)
	if req.Signal != nil {
		sig := *req.Signal
		sig.Input.Data, sig.Input.DataBase64 = bytes.Clone(sig.Input.Data), bytes.Clone(sig.Input.DataBase64)
		req.Signal = &sig
	}
	return s.Starter.Start(ctx, req)
}

// startMem runs a router over e with ledger led, starter st and the extra
// Kafka options opts.
func (e *testEnv) startMem(cfg Config, led Ledger, st Starter, opts ...kgo.Opt) *runner {
	e.t.Helper()
	r, err := New(cfg, Options{Ledger: led, DeadLetterLog: e.dlq, Starter: st, Registerer: prometheus.NewRegistry(), Log: testLogger("r1"),
		KafkaOpts: append([]kgo.Opt{kgo.HeartbeatInterval(100 * time.Millisecond)}, opts...)})
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rn := &runner{t: e.t, r: r, cancel: cancel, done: make(chan error, 1)}
	go func() { rn.done <- r.Run(ctx) }()
	e.t.Cleanup(func() { _ = rn.stop() })
	return rn
}

// produceBatch writes events e<from>..e<from+n-1> (200 bytes of data
// each) to partition p in one produce call.
func (e *testEnv) produceBatch(p int32, from, n int) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: testTopic, Partition: p, Value: value(fmt.Sprintf("e%d", from+i), strings.Repeat("x", 200))}
	}
	if err := e.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		e.t.Fatal(err)
	}
}

// gcFrees runs the GC until want of the cleanups behind gone ran, for 5 s
// at most, and returns how many did.
func gcFrees(gone <-chan struct{}, want int) int {
	freed := 0
	deadline := time.After(5 * time.Second)
	for freed < want {
		runtime.GC()
		select {
		case <-gone:
			freed++
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			return freed
		}
	}
	return freed
}

// Once marked and committed, a record's bytes are not kept: 400 records
// started, marked and committed, none in flight, none waiting; the data of
// records 160..223's starts (each a slice of its record's value, which
// keeps the record's whole fetched batch) must then be freed. With the
// default mark batch (512) the 400 marks go in a few flushes, and the
// marker reuses its batch: the flushed jobs, each with its request, were
// left in the slice's array until a larger flush overwrote them (up to
// mark_batch jobs; adversary 34).
func TestFinishedRecordsAreNotKeptInMemoryOnceMarkedAndCommitted(t *testing.T) {
	e := newTestEnv(t, 1, envOpt{})
	const n, lo, hi = 400, 160, 224
	e.produceBatch(0, 0, n)
	gone := make(chan struct{}, hi-lo)
	var watched atomic.Int32
	st := ownDataStarter{Starter: e.starter.as("r1"), seen: func(req decide.StartRequest) {
		if r := req.Record; r != nil && r.Offset >= lo && r.Offset < hi && len(req.Input.Data) > 0 {
			watched.Add(1)
			runtime.AddCleanup(&req.Input.Data[0], func(ch chan struct{}) { ch <- struct{}{} }, gone)
		}
	}}
	rn := e.startMem(e.config(), e.led, st)
	e.waitCommittedToEnd(20 * time.Second)
	if got := watched.Load(); got != hi-lo {
		t.Fatalf("set-up: %d of %d watched starts seen", got, hi-lo)
	}
	freed := gcFrees(gone, hi-lo)
	if freed != hi-lo {
		// Seen once in CI (-race, beside an adversary's tests), never
		// alone: say whether the bytes were kept until the next poll (a
		// bounded hold: what holds the last poll) or for good (a leak).
		e.produceBatch(0, n, 1)
		e.waitCommittedToEnd(20 * time.Second)
		later := gcFrees(gone, hi-lo-freed)
		t.Errorf("every record marked and committed, nothing in flight: %d of %d records' bytes still in memory; "+
			"of them, %d were freed once one more record was polled, started and committed", hi-lo-freed, hi-lo, later)
	}
	if err := rn.stop(); err != nil {
		t.Fatal(err)
	}
}
