package ops

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/dedupio/dedup/processor/replay"
)

func dlqReplayCommand() command {
	return command{
		name:    "dlq replay",
		summary: "dead letters back through the dedup gate (a plan unless --execute)",
		usage:   "--config FILE [--reason R,...] [--limit N] [--execute] [--output json]",
		timeout: time.Hour,
		help: `Sends dead-lettered records back to their source topics, through the dedup gate again.

It reads the dead-letter topics of the config's topics from their start to their end as of now
(under kafka.isolation_level read_committed, the committed dead letters up to the last stable
offset) and keeps those of the --reason given (default: all). Each goes back whole: with its
original key, value and headers, and where the event was first read (dedup-origin-*), so the
coordinates ID rule keeps its first ID however many round trips it makes. A dead letter that lacks
part of the original (dedup-value-dropped, dedup-key-dropped, dedup-headers-dropped: the
dead-letter topic refused it whole) is sent back as the original is in the source topic, at the
coordinates it names; when the original is gone from there (retention, compaction, a recreated
topic, another record there now: dedup-original-sha256 differs), it is refused, naming those
coordinates. A record not written by dedup is refused too, and so is a dead letter whose source
topic is not in kafka.topics (no router reads it) or no longer exists.

Without --execute it writes nothing, as kafka-consumer-groups --reset-offsets: it prints the plan
("would replay": how many records per reason, how many from the source topic, which it refuses
and why, which the --reason filter or --limit leaves). --dry-run is the same, spelt out.
With --execute it writes them and prints the same report ("replayed").

Workflows already started stay skipped by the ledger; a record whose cause is not fixed (a
conflict, a poison payload) is dead-lettered again: choose the reasons. Exit code 0 when done (or
planned), 2 on an error.`,
		example: `dedup dlq replay --config dedup.yaml --reason temporal_permanent             # the plan
dedup dlq replay --config dedup.yaml --reason temporal_permanent --execute   # the replay`,
		flags: func(fs *flag.FlagSet) func(context.Context, *Tool, []string) (any, int, error) {
			reasons := fs.String("reason", "", "comma-separated dead-letter reasons to replay (default: all)")
			limit := fs.Int("limit", 0, "replay at most this many records (0: all)")
			dryRun := planFlags(fs)
			return func(ctx context.Context, t *Tool, args []string) (any, int, error) {
				if len(args) > 0 {
					return nil, ExitError, fmt.Errorf("unexpected arguments %q", args)
				}
				dry, err := dryRun()
				if err != nil {
					return nil, ExitError, err
				}
				if *limit < 0 {
					return nil, ExitError, fmt.Errorf("--limit %d: want 0 (all) or more", *limit)
				}
				return t.ReplayDeadLetters(ctx, *reasons, *limit, !dry)
			}
		},
	}
}

// ReplayReport is dedup dlq replay's answer.
type ReplayReport struct {
	DeadLetterTopics []string `json:"dead_letter_topics"`
	replay.Result
}

// ReplayDeadLetters replays the dead letters of the config's topics (of
// the comma-separated reasons, all when empty), or only plans it unless
// execute.
func (t *Tool) ReplayDeadLetters(ctx context.Context, reasons string, limit int, execute bool) (*ReplayReport, int, error) {
	if _, err := t.kafka(); err != nil {
		return nil, ExitError, err
	}
	// Only to the topics the routers read: there the record passes the
	// dedup gate again; a dead letter of another topic is refused.
	o := replay.Options{Brokers: t.cfg.Kafka.Brokers, ClientOpts: append(slices.Clone(t.kopts), t.cfg.Kafka.FetchLimits()...), IsolationLevel: t.cfg.Kafka.IsolationLevel, Execute: execute, Limit: limit, Idle: t.idle,
		SourceTopics: t.cfg.Kafka.Topics}
	for _, tp := range t.cfg.Kafka.Topics {
		o.DeadLetterTopics = append(o.DeadLetterTopics, t.cfg.Kafka.DeadLetterTopicFor(tp))
	}
	for _, r := range strings.Split(reasons, ",") {
		if r = strings.TrimSpace(r); r != "" {
			o.Reasons = append(o.Reasons, r)
		}
	}
	res, err := replay.Run(ctx, o, t.log)
	rep := &ReplayReport{DeadLetterTopics: o.DeadLetterTopics, Result: res}
	if err != nil {
		return rep, ExitError, fmt.Errorf("replaying dead letters: %w", err)
	}
	if execute {
		t.log.Info("dlq replay", "dead_letter_topics", o.DeadLetterTopics, "read", res.Read, "replayed", res.Replayed,
			"from_source", res.FromSource, "refused", len(res.Refused))
	}
	return rep, ExitFound, nil
}

func (r *ReplayReport) text(b *strings.Builder) {
	verb := "would replay"
	if r.Executed {
		verb = "replayed"
	}
	fmt.Fprintf(b, "dead-letter topics %s: read %d dead letters\n", strings.Join(r.DeadLetterTopics, ", "), r.Read)
	fmt.Fprintf(b, "%s %d: %s", verb, sum(r.Replayed), byReason(r.Replayed))
	if n := sum(r.FromSource); n > 0 {
		fmt.Fprintf(b, " (%d from the source topic, their dead letters lacking part of the original: %s)", n, byReason(r.FromSource))
	}
	b.WriteString("\n")
	fmt.Fprintf(b, "refused %d\n", len(r.Refused))
	for _, ref := range r.Refused {
		fmt.Fprintf(b, "  %s (reason %s, original %s): %s\n", ref.DeadLetter, ref.Reason, cmp.Or(ref.Original, "unknown"), ref.Why)
	}
	if n := sum(r.Skipped); n > 0 {
		fmt.Fprintf(b, "left by --reason/--limit %d: %s\n", n, byReason(r.Skipped))
	}
	for _, s := range r.Stalls {
		fmt.Fprintf(b, "ended early: %s\n", s)
	}
	if !r.Executed {
		b.WriteString("nothing written: run again with --execute to replay\n")
	}
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// byReason is "conflict 2, no_route 1", by reason, or "none".
func byReason(m map[string]int) string {
	var keys []string
	for k, v := range m {
		if v > 0 {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return "none"
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", cmp.Or(k, "(no reason)"), m[k])
	}
	return strings.Join(parts, ", ")
}
