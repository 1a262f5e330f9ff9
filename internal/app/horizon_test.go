package app

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dedupio/dedup/processor"
)

func TestHorizon(t *testing.T) {
	const day = 24 * time.Hour
	for _, tc := range []struct {
		name string
		h    Horizon
		want string // substring of the error; "" for none
	}{
		{"ledger keeps forever", Horizon{Ledger: forever, Namespace: day, Topics: map[string]time.Duration{"a": forever}}, ""},
		{"ledger covers the topic", Horizon{Ledger: 7 * day, Namespace: day, Topics: map[string]time.Duration{"a": 7 * day}}, ""},
		{"namespace covers the topic", Horizon{Ledger: day, Namespace: 7 * day, Topics: map[string]time.Duration{"a": 3 * day}}, ""},
		{"both short", Horizon{Ledger: day, Namespace: 3 * day, Topics: map[string]time.Duration{"a": 7 * day, "b": day}},
			"events older than 72h0m0s (the Temporal namespace retention) are forgotten, but topics a (retention.ms 168h0m0s)"},
		{"topic kept forever", Horizon{Ledger: 30 * day, Namespace: day, Topics: map[string]time.Duration{"a": forever}},
			"topics a (retention.ms forever)"},
		{"allow_* ignores the namespace", Horizon{Ledger: day, Namespace: 30 * day, Topics: map[string]time.Duration{"a": 7 * day}, OnlyLedger: true},
			"(postgres.retention (a route uses an allow_* reuse policy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.h.Check()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want it to contain %q", err, tc.want)
			case err != nil && !strings.Contains(err.Error(), "accept_short_horizon"):
				t.Fatalf("error %v does not name the setting that accepts it", err)
			}
		})
	}
}

// The horizon check reads every namespace the routes start workflows in.
func TestRouteNamespaces(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Temporal.Namespace = "main"
	cfg.Routes = processor.Routes{{ID: "a"}, {ID: "b", Namespace: "other"}, {ID: "c", Namespace: "main"}, {ID: "d", Namespace: "other"}}
	if got := routeNamespaces(cfg); !slices.Equal(got, []string{"main", "other"}) {
		t.Errorf("routeNamespaces = %v", got)
	}
}
