package config

import (
	"slices"
	"testing"

	"github.com/dedupio/dedup/processor/decide"
)

// The rule and the replay horizon name the same routes: those whose
// repeats only the ledger refuses.
func TestLedgerOnlyRoutes(t *testing.T) {
	cfg := Default()
	cfg.Routes = decide.Routes{
		{ID: "a", IDReusePolicy: decide.ReuseRejectDuplicate},
		{ID: "b", IDReusePolicy: decide.ReuseAllowDuplicateFailedOnly},
		{ID: "c", IDReusePolicy: decide.ReuseRejectDuplicate, Mode: decide.ModeSignal},
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
