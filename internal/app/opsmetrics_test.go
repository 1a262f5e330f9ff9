package app

import (
	"context"
	"crypto/sha256"
	"io"
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dedupio/dedup/internal/testsupport/pgtest"
	"github.com/dedupio/dedup/processor"
	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/sink/ledger"
)

// dedup_ledger_started_cache_hits_total, registered with the ledger's
// other metrics, counts the workflow IDs the ledger answered from its
// memory of started rows (postgres.started_cache, the default here).
func TestTheStartedCacheHitsMetricCountsWhatTheLedgerAnsweredFromMemory(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel() // the purge registerOps may start
	url := pgtest.NewDatabase(t)
	if err := ledger.Migrate(ctx, url); err != nil {
		t.Fatal(err)
	}
	cfg := ledger.DefaultConfig()
	cfg.URL = url
	led, err := ledger.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer led.Close()
	reg := prometheus.NewRegistry()
	if err := registerOps(ctx, reg, led, cfg, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatal(err)
	}
	in := decide.Intent{WorkflowID: "activity-a:e1", ActivityID: "a", EventID: "e1", IDRule: "field",
		PayloadHash: sha256.Sum256([]byte("p")), Topic: "events", Partition: 0, Offset: 1}
	if _, err := led.Claim(ctx, []decide.Intent{in}); err != nil {
		t.Fatal(err)
	}
	if err := led.MarkStarted(ctx, []processor.Started{{WorkflowID: in.WorkflowID, RunID: "r", Generation: 1}}); err != nil {
		t.Fatal(err)
	}
	for range 3 { // the ledger answers the first, memory the other two
		cl, err := led.Claim(ctx, []decide.Intent{in})
		if err != nil {
			t.Fatal(err)
		}
		if cl[0].Verdict != decide.VerdictDuplicate {
			t.Fatalf("verdict %v, want duplicate", cl[0].Verdict)
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "dedup_ledger_started_cache_hits_total" {
			if v := mf.GetMetric()[0].GetCounter().GetValue(); v != 2 {
				t.Fatalf("dedup_ledger_started_cache_hits_total = %v, want 2", v)
			}
			return
		}
	}
	t.Fatal("dedup_ledger_started_cache_hits_total not gathered")
}
