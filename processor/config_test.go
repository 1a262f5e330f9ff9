package processor

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dedupio/dedup/processor/decide"
)

// starts.mark_interval is how long a started workflow's record may wait
// to be finished (committable). One at least as long as
// kafka.revoke_timeout makes every revoke abandon what was started and
// not yet marked (the new owner re-drives it all), and every shutdown
// wait out its drain: Validate refuses it, naming the field.
func TestValidateRefusesAMarkIntervalNotBelowTheRevokeTimeout(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Brokers, cfg.Group, cfg.Topics, cfg.ResetOffset = []string{"localhost:9092"}, "g", []string{"t"}, "earliest"
	cfg.Routes = decide.Routes{{ID: "r", Match: decide.Match{Type: "t"}, WorkflowType: "W", TaskQueue: "q"}}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("default config with brokers: %v", err)
	}
	for _, d := range []time.Duration{cfg.RevokeTimeout, time.Hour} {
		cfg.Starts.MarkInterval = d
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), "starts.mark_interval") {
			t.Errorf("mark_interval %s (revoke_timeout %s): Validate = %v, want an error naming starts.mark_interval", d, cfg.RevokeTimeout, err)
		}
	}
}

// A fetch bound of 0 or less fetches nothing, and one over the Kafka
// client's 100 MiB read bound makes the client refuse to start (or, over
// 2 GiB, wraps): Validate refuses each, naming the field.
func TestValidateRefusesAFetchBoundOutOfKafkasRange(t *testing.T) {
	for _, field := range []string{"fetch_max_bytes", "fetch_max_partition_bytes"} {
		for _, v := range []int{0, -1, 100<<20 + 1, 1 << 31} {
			cfg := DefaultConfig()
			cfg.Brokers, cfg.Group, cfg.Topics, cfg.ResetOffset = []string{"localhost:9092"}, "g", []string{"t"}, "earliest"
			cfg.Routes = decide.Routes{{ID: "r", Match: decide.Match{Type: "t"}, WorkflowType: "W", TaskQueue: "q"}}
			if field == "fetch_max_bytes" {
				cfg.FetchMaxBytes = v
			} else {
				cfg.FetchMaxPartitionBytes = v
			}
			if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "kafka."+field) {
				t.Errorf("%s %d: Validate = %v, want an error naming kafka.%s", field, v, err, field)
			}
		}
	}
}

// kafka.drain_timeout bounds the whole shutdown, which needs a mark's
// round trip to PostgreSQL, then the final commit's two to the group
// coordinator (read the group's offsets, commit) and the leave. They keep
// at least 1s of it whatever the drain took (shutdownReserve); below two
// seconds the drain would have next to nothing, and the commit's share
// was once a few milliseconds, under what a loaded broker takes: every
// shutdown would lose its commit, and the next owner re-drive what this
// router started. Validate refuses it, naming the field; the smallest it
// accepts is held by
// TestShutdownAtTheSmallestDrainTimeoutCommitsThroughASlowCoordinator and
// TestShutdownAtTheSmallestDrainTimeoutCommitsTheFinishedPrefixWhenTheDrainRunsOut.
func TestValidateRefusesADrainTimeoutBelowTwoSeconds(t *testing.T) {
	for _, d := range []time.Duration{time.Nanosecond, 200 * time.Millisecond, time.Second, minDrainTimeout - time.Nanosecond} {
		cfg := DefaultConfig()
		cfg.Brokers, cfg.Group, cfg.Topics, cfg.ResetOffset = []string{"localhost:9092"}, "g", []string{"t"}, "earliest"
		cfg.Routes = decide.Routes{{ID: "r", Match: decide.Match{Type: "t"}, WorkflowType: "W", TaskQueue: "q"}}
		cfg.DrainTimeout = d
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "kafka.drain_timeout") {
			t.Errorf("drain_timeout %s: Validate = %v, want an error naming kafka.drain_timeout", d, err)
		}
	}
	cfg := DefaultConfig()
	cfg.Brokers, cfg.Group, cfg.Topics, cfg.ResetOffset = []string{"localhost:9092"}, "g", []string{"t"}, "earliest"
	cfg.Routes = decide.Routes{{ID: "r", Match: decide.Match{Type: "t"}, WorkflowType: "W", TaskQueue: "q"}}
	cfg.DrainTimeout = minDrainTimeout
	if err := cfg.Validate(); err != nil {
		t.Errorf("drain_timeout %s: Validate = %v, want nil", minDrainTimeout, err)
	}
}

// An empty seed ("", "  ": a list built from an unset variable, a
// trailing comma) is one franz-go dials as ":9092", this machine: a
// router would talk to whatever listens there, or fail to connect with
// an error that names no setting. Validate refuses it, naming the entry.
func TestValidateRefusesAnEmptySeedBrokerNamingIt(t *testing.T) {
	for _, brokers := range [][]string{{""}, {"b-1.example:9092", ""}, {"b-1.example:9092", "  "}} {
		cfg := DefaultConfig()
		cfg.Brokers, cfg.Group, cfg.Topics, cfg.ResetOffset = brokers, "g", []string{"t"}, "earliest"
		cfg.Routes = decide.Routes{{ID: "r", Match: decide.Match{Type: "t"}, WorkflowType: "W", TaskQueue: "q"}}
		want := fmt.Sprintf("kafka.brokers[%d]: empty", len(brokers)-1)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("brokers %q: Validate = %v, want an error naming %s", brokers, err, want)
		}
	}
}
