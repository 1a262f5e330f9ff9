package ledger

import (
	"strings"
	"testing"
	"time"
)

// The replay-horizon rule: whatever remembers an event must remember it
// longer than any copy of it can stay in a topic.
func TestHorizon(t *testing.T) {
	const day = 24 * time.Hour
	topic := func(retention, segment time.Duration) map[string]TopicRetention {
		return map[string]TopicRetention{"a": {Retention: retention, Segment: segment}}
	}
	for _, tc := range []struct {
		name string
		h    Horizon
		want string // substring of the error; "" for none
	}{
		{"ledger keeps forever", Horizon{Ledger: Forever, Namespace: day, Topics: topic(Forever, 7*day)}, ""},
		{"ledger covers the topic", Horizon{Ledger: 15 * day, Namespace: day, Topics: topic(7*day, 7*day)}, ""},
		{"ledger covers retention.ms, not the segment's span", Horizon{Ledger: 10 * day, Namespace: day, Topics: topic(7*day, 7*day)},
			"postgres.retention: events older than 240h0m0s (postgres.retention) are forgotten, but topics a (retention.ms 168h0m0s + segment.ms 168h0m0s: a record stays up to 336h0m0s)"},
		{"as long is not longer", Horizon{Ledger: 8 * day, Namespace: day, Topics: topic(7*day, day)}, "a record stays up to 192h0m0s"},
		{"namespace covers the topic", Horizon{Ledger: day, Namespace: 7 * day, Topics: topic(3*day, day)}, ""},
		{"both short", Horizon{Ledger: day, Namespace: 3 * day, Topics: map[string]TopicRetention{"a": {7 * day, day, false}, "b": {day, day / 2, false}}},
			"events older than 72h0m0s (the Temporal namespace retention) are forgotten, but topics a (retention.ms 168h0m0s + segment.ms 24h0m0s: a record stays up to 192h0m0s) may"},
		{"topic kept forever", Horizon{Ledger: 30 * day, Namespace: day, Topics: topic(Forever, day)}, "topics a (retention.ms -1: kept forever)"},
		{"segment.ms forever", Horizon{Ledger: 30 * day, Namespace: day, Topics: topic(day, Forever)}, "a record stays up to forever"},
		{"compacted", Horizon{Ledger: 30 * day, Namespace: day, Topics: map[string]TopicRetention{"a": {day, day, true}}}, "topics a (cleanup.policy compact"},
		{"allow_* ignores the namespace", Horizon{Ledger: day, Namespace: 30 * day, Topics: topic(7*day, day), OnlyLedger: true},
			"(postgres.retention (a route uses an allow_* reuse policy"},
		{"a purge names its flag", Horizon{Ledger: day, LedgerBy: "--older-than", Namespace: day, Topics: topic(7*day, day)},
			"--older-than: events older than 24h0m0s (--older-than) are forgotten"},
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
			case err != nil && !strings.Contains(err.Error(), "re-send"):
				t.Fatalf("error %v does not name the producers' re-send delay", err)
			}
		})
	}
}
