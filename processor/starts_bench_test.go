package processor

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"

	"github.com/dedupio/dedup/processor/decide"
)

// BenchmarkSubmitNewStarts is the start pool's bookkeeping of a claimed
// record's new start up to the start queue (the job, its entry in the
// starts in flight, the hand-over), per workflow of a unique-heavy
// backlog: batches of 500 distinct workflow IDs, taken off the queue and
// forgotten after each.
func BenchmarkSubmitNewStarts(b *testing.B) {
	cfg := DefaultConfig()
	const batch = 500
	if c := 2 * (cfg.MaxInFlight + cfg.MaxPollRecords); c < batch {
		b.Fatalf("the start queue holds %d jobs, fewer than a batch of %d", c, batch)
	}
	ctx := context.Background()
	s := newStartPool(cfg, slog.New(slog.NewJSONHandler(io.Discard, nil)), nil, nil, nil, nil, hooks{}, nil,
		func(*record, bool) {}, ctx)
	ids := make([]string, batch)
	for i := range ids {
		ids[i] = fmt.Sprintf("activity-order-confirmation:evt-%d", i)
	}
	rec := &record{}
	req := decide.StartRequest{WorkflowType: "W", TaskQueue: "q", ReusePolicy: decide.ReuseRejectDuplicate, Generation: 1,
		Record: &decide.RecordRef{Topic: "t"}}
	submitted := 0
	b.ReportAllocs()
	for b.Loop() {
		for _, id := range ids {
			req.WorkflowID = id
			if s.submit(ctx, rec, req, false) {
				b.Fatalf("%s waits on a start in flight: none is", id)
			}
		}
		for range ids {
			j := <-s.startQ
			delete(s.starting, j.req.WorkflowID)
		}
		submitted += batch
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(submitted), "ns/start")
}
