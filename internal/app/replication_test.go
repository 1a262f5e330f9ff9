package app

import (
	"strings"
	"testing"

	"github.com/dedupio/dedup/sink/ledger"
)

// A ledger a failover can rewind is refused at start when a route relies
// on the ledger alone or the ledger outlives Temporal's retention, unless
// postgres.accept_async_replication accepts it; what cannot lose a commit
// starts, with a warning where a failover could still pick the wrong
// standby.
func TestReplicationCheckRefusesARewindableLedger(t *testing.T) {
	lone := ledger.Replication{SynchronousCommit: "on", DetailsVisible: true}
	async := ledger.Replication{SynchronousCommit: "on", Senders: 1, DetailsVisible: true, Async: []string{"b"}}
	sync := ledger.Replication{SynchronousCommit: "on", SynchronousStandbyNames: "a", Senders: 1, DetailsVisible: true}
	allow := []string{"routes[2] (id crm-sync, id_reuse_policy allow_duplicate)"}
	const forever = "postgres.retention 0 keeps started rows forever, longer than the Temporal namespace retention"
	for _, tc := range []struct {
		name string
		c    replicationCheck
		err  []string // substrings of the error; nil: none
		warn string   // substring of a warning; "": none
	}{
		{"a lone server", replicationCheck{Replication: lone, Routes: allow, Outlives: forever}, nil, ""},
		{"a synchronous standby", replicationCheck{Replication: sync, Routes: allow, Outlives: forever}, nil, ""},
		{"an asynchronous standby and an allow_* route", replicationCheck{Replication: async, Routes: allow},
			[]string{"routes[2] (id crm-sync, id_reuse_policy allow_duplicate) relies on the ledger alone", "1 standby(s) replicate asynchronously (synchronous_standby_names is empty)",
				"postgres.accept_async_replication: true"}, ""},
		{"an asynchronous standby and a ledger kept forever", replicationCheck{Replication: async, Outlives: forever},
			[]string{"postgres.retention 0 keeps started rows forever", "synchronous_standby_names on the server"}, ""},
		{"an asynchronous standby, reject_duplicate, a ledger no longer than Temporal", replicationCheck{Replication: async},
			nil, "Temporal refuses the second start"},
		{"accepted", replicationCheck{Replication: async, Routes: allow, Outlives: forever, Accept: true},
			nil, "accepted by postgres.accept_async_replication"},
		{"a disconnected standby's slot", replicationCheck{Replication: ledger.Replication{SynchronousCommit: "on", IdleSlots: 1}, Routes: allow},
			[]string{"1 standby(s) replicate asynchronously"}, ""},
		{"synchronous_commit local", replicationCheck{Replication: ledger.Replication{SynchronousCommit: "local", SynchronousStandbyNames: "a", Senders: 1}, Routes: allow},
			[]string{"synchronous_commit is local for dedup's sessions"}, ""},
		{"synchronous_commit off on a lone server", replicationCheck{Replication: ledger.Replication{SynchronousCommit: "off"}, Outlives: forever},
			[]string{"synchronous_commit is off", "a crash loses it"}, ""},
		{"an asynchronous standby beside the synchronous one", replicationCheck{Replication: ledger.Replication{SynchronousCommit: "remote_write",
			SynchronousStandbyNames: "a", Senders: 2, DetailsVisible: true, Async: []string{"dr"}}, Routes: allow, Outlives: forever},
			nil, "standbys dr replicate asynchronously beside the synchronous ones"},
		{"a role that cannot see which standbys are synchronous", replicationCheck{Replication: ledger.Replication{SynchronousCommit: "on",
			SynchronousStandbyNames: "ANY 1 (a, b)", Senders: 3}, Routes: allow, Outlives: forever},
			nil, "cannot see which are synchronous (grant it pg_monitor"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			warnings, err := tc.c.Check()
			switch {
			case tc.err == nil && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.err != nil && err == nil:
				t.Fatalf("no error, want one naming %q (warnings %q)", tc.err, warnings)
			}
			for _, s := range tc.err {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %v, want it to contain %q", err, s)
				}
			}
			if tc.err != nil && !strings.HasPrefix(err.Error(), "postgres.accept_async_replication: ") {
				t.Errorf("error %v does not start with the setting's name", err)
			}
			if got := strings.Join(warnings, "\n"); (tc.warn == "") != (got == "") || !strings.Contains(got, tc.warn) {
				t.Errorf("warnings %q, want one containing %q", warnings, tc.warn)
			}
		})
	}
}

// A role without pg_monitor is warned whenever a standby it counts may be
// an asynchronous one, as a role with pg_monitor is told which one is:
// here the synchronous standby "a" is disconnected (its slot idle) and
// "b" streams asynchronously. A failover tool that promotes b (the only
// standby up) loses the commits only a had. With details, Async names b
// and a warning says so; without them (what ledger.Replication reads for
// such a role: the sender counted, no sync_state) only one sender
// streams, and the warning, which asks for more than one sender, is
// never given.
func TestReplicationCheckWarnsARoleThatCannotSeeWhetherAStreamingStandbyIsSynchronous(t *testing.T) {
	seen := ledger.Replication{SynchronousCommit: "on", SynchronousStandbyNames: `"a"`, Senders: 1, IdleSlots: 1, DetailsVisible: true, Async: []string{"b"}}
	blind := seen
	blind.DetailsVisible, blind.Async = false, nil
	allow := []string{"routes[0] (id crm-sync, id_reuse_policy allow_duplicate)"}
	for name, r := range map[string]ledger.Replication{"with pg_monitor": seen, "without pg_monitor": blind} {
		warnings, err := replicationCheck{Replication: r, Routes: allow}.Check()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(warnings) == 0 {
			t.Errorf("%s: no warning, want one that a streaming standby may be asynchronous (%+v)", name, r)
		}
	}
}
