package ledger_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/dedupio/dedup/processor"
	"github.com/dedupio/dedup/processor/decide"
)

// BenchmarkMarkStarted is the cost of one MarkStarted of 100 rows just
// claimed (the unique path's mark), on a ledger of 200,000 rows, where the
// planner reads the ledger along its key. The claims are not timed.
func BenchmarkMarkStarted(b *testing.B) {
	l := open(b)
	ctx := context.Background()
	if _, err := l.Pool().Exec(ctx, `
INSERT INTO dedup_ledger (workflow_id, activity_id, event_id, id_rule, payload_hash, topic, kafka_partition, kafka_offset, key, state)
SELECT 'fill-' || g, 'a', 'e' || g, 'header', '\x00', 't', 0, g, gen_random_uuid(), 'started'
FROM generate_series(1, 200000) g`); err != nil {
		b.Fatal(err)
	}
	if _, err := l.Pool().Exec(ctx, `VACUUM ANALYZE dedup_ledger`); err != nil {
		b.Fatal(err)
	}
	in := make([]decide.Intent, 100)
	st := make([]processor.Started, len(in))
	b.ResetTimer()
	for n := range b.N {
		b.StopTimer()
		for i := range in {
			in[i] = intent(fmt.Sprintf("m%d-e%d", n, i), "p")
			st[i] = processor.Started{WorkflowID: in[i].WorkflowID, RunID: "r", Generation: 1}
		}
		if _, err := l.Claim(ctx, in); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if err := l.MarkStarted(ctx, st); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*len(st)), "µs/row")
}
