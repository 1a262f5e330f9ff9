package config

import (
	"slices"
	"testing"

	"github.com/dedupio/dedup/processor"
)

// The rule and the replay horizon name the same routes: those whose
// repeats only the ledger refuses.
func TestLedgerOnlyRoutes(t *testing.T) {
	cfg := Default()
	cfg.Routes = processor.Routes{
		{ID: "a", IDReusePolicy: processor.ReuseRejectDuplicate},
		{ID: "b", IDReusePolicy: processor.ReuseAllowDuplicateFailedOnly},
		{ID: "c", IDReusePolicy: processor.ReuseRejectDuplicate, Mode: processor.ModeSignal},
	}
	want := []string{"routes[1] (id b, id_reuse_policy allow_duplicate_failed_only)", "routes[2] (id c, a signal route)"}
	if got := LedgerOnlyRoutes(cfg); !slices.Equal(got, want) || len(LedgerOnlyRoutes(cfg)) == 0 {
		t.Errorf("LedgerOnlyRoutes = %q, want %q", got, want)
	}
	cfg.Routes = cfg.Routes[:1]
	if len(LedgerOnlyRoutes(cfg)) > 0 {
		t.Error("a reject_duplicate start route relies on the ledger alone")
	}
}
