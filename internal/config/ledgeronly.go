package config

import (
	"fmt"

	"github.com/dedupio/dedup/processor/decide"
)

// LedgerOnlyRoutes names the routes whose repeats only the ledger refuses
// for good: an allow_* reuse policy lets Temporal start a closed ID
// again, and Temporal drops a re-sent signal only within the run that
// recorded it.
func LedgerOnlyRoutes(cfg Config) []string {
	var out []string
	for i, rt := range cfg.Routes {
		if rt.IDReusePolicy != decide.ReuseRejectDuplicate || rt.Mode == decide.ModeSignal {
			what := "id_reuse_policy " + string(rt.IDReusePolicy)
			if rt.Mode == decide.ModeSignal {
				what = "a signal route"
			}
			out = append(out, fmt.Sprintf("routes[%d] (id %s, %s)", i, rt.ID, what))
		}
	}
	return out
}
