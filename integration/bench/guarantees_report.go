package bench

import (
	"fmt"
	"strings"
	"time"

	"github.com/dedupio/dedup/integration/bench/peer"
)

// guaranteesMarkdown is the "what it costs and guarantees" table: the
// Watermill peer and dedup side by side, throughput (median records/s
// per latency profile) above what each did in the guarantees stage's
// scenarios.
func (r *Report) guaranteesMarkdown() string {
	if len(r.Stages) > 0 && r.Guarantees == nil {
		return "" // a -stages run without the guarantees stage
	}
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("\n### What it costs and guarantees: the Watermill peer and dedup\n\n")
	p("| | Watermill peer | dedup |\n|---|---|---|\n")
	for _, pr := range r.Profiles {
		med := func(f func(Rep) float64) string { return num(pr.over(f).Median) }
		if pr.ran(StageWatermill, StageBacklog) {
			p("| throughput at %s, unique-heavy (%d records), median records/s | %s | %s |\n", pr.Latency.Name, r.Params.Records,
				med(func(x Rep) float64 { return x.Watermill.Records.PerSec }), med(func(x Rep) float64 { return x.Unique.Records.PerSec }))
		}
		if !pr.ran(StageWatermillReplay, StageReplay) {
			continue
		}
		p("| throughput at %s, all-duplicate replay, median records/s (Watermill: %d records, Temporal calls per workflow ID %s; dedup: %d records, Temporal calls %s) | %s | %s |\n",
			pr.Latency.Name, r.Params.Records, med(func(x Rep) float64 { return x.WatermillReplay.TemporalPerUnique }),
			r.Params.ReplayN, med(func(x Rep) float64 { return float64(x.Replay.TemporalCalls) }),
			med(func(x Rep) float64 { return x.WatermillReplay.Records.PerSec }), med(func(x Rep) float64 { return x.Replay.Records.PerSec }))
	}
	g := r.Guarantees
	if g == nil {
		p("| guarantees | not run (-guarantee-records 0) | |\n")
		return b.String()
	}
	d := g.Dedup
	if d == nil {
		d = &peer.Side{}
	}
	calls := func(x peer.Pass) string {
		return fmt.Sprintf("%d calls: %d started, %d already started, %d failed", x.TemporalCalls, x.NewStarts, x.AlreadyStarted, x.Errors)
	}
	side := func(label string, f func(peer.Side) string) {
		p("| %s | %s | %s |\n", label, f(g.Watermill), f(*d))
	}
	side(fmt.Sprintf("first pass, one replica (%d records, %.0f%% duplicates, %d workflow IDs): Temporal calls", r.Params.GuaranteeRecords, GuaranteeDupRatio*100, g.Workflows),
		func(s peer.Side) string { return calls(s.First) })
	side("replay after a restart (a new process, the group's offsets deleted): Temporal calls",
		func(s peer.Side) string { return calls(s.Restart) })
	side("replay after Temporal's retention has passed (emulated, see below): Temporal calls",
		func(s peer.Side) string { return calls(s.AfterRetention) })
	side("executions per workflow ID over the first pass and the replay after retention (1 = exactly once)",
		func(s peer.Side) string { return num(s.ExecutionsPerWorkflow) })
	side(fmt.Sprintf("two replicas in one group (%d records, every duplicate on another partition than its original, %d workflow IDs): Temporal calls", r.Params.GuaranteeRecords, g.TwoReplicaWorkflows),
		func(s peer.Side) string { return calls(s.TwoReplicas) })
	side(fmt.Sprintf("Temporal refuses every start for %s (start timeout %s) from before the backlog (%d workflow IDs): workflow IDs never started (events lost)",
		GuaranteeStartTimeout+2*time.Second, GuaranteeStartTimeout, g.OutageWorkflows),
		func(s peer.Side) string {
			if s.Outage == nil {
				return "not run"
			}
			out := fmt.Sprintf("**%d** (%s)", s.OutageMissing, calls(*s.Outage))
			if s.Outage.Lost > 0 {
				out += fmt.Sprintf("; %d redeliveries dropped by the deduplicator", s.Outage.Lost)
			}
			return out
		})
	p("\nThroughput: the stages above, per latency profile. Guarantees: one run of the guarantees stage (`peer.Guarantees`), in a stage process, with no added latency (the proxies in the path, as at 0 ms). Retention emulation: %s.\n", g.RetentionEmulation)
	return b.String()
}
