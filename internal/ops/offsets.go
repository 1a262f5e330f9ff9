package ops

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

func offsetsResetCommand() command {
	return command{
		name:    "offsets reset",
		summary: "move the group's committed offsets (a plan and forecast unless --execute)",
		usage:   "--config FILE --to earliest|latest|TIME|OFFSET [--topic T] [--partition P,...] [--execute] [--output json]",
		help: `Moves the group's committed offsets, for a replay (back) or to skip a backlog (forward).

--to is earliest (the log start), latest (the log end; under kafka.isolation_level read_committed,
the last stable offset: a transaction still open is not skipped), a time (RFC 3339: the first
record at or after it) or an offset (clamped to the log). --topic and --partition narrow it (default: every
partition of the config's topics).

It refuses while the group has live members: stop every replica first (a member would overwrite
the reset with its own commits).

Without --execute it changes nothing, as kafka-consumer-groups --reset-offsets: it prints the plan
("would reset", a table of each partition's move) and a forecast: it reads the records that would be
re-read, decides each with the router's code and asks the ledger (read-only) what it would do:
how many workflows are expected to start anew, how many the ledger skips as started, re-drives or
starts again, and how many are conflicts, dead letters, or skipped (no route, tombstones). It reads
what the router reads: under read_committed, committed records only, up to the last stable offset.
A move forward skips records: it says how many offsets. --dry-run is the same, spelt out.

With --execute it commits the new offsets, prints the same table ("reset") and logs each move
(group, topic, partition, from, to). Exit code 0 when done (or planned), 2 on an error or a refusal.`,
		example: `dedup offsets reset --config dedup.yaml --to 2026-03-01T00:00:00Z             # the plan and forecast
dedup offsets reset --config dedup.yaml --to 2026-03-01T00:00:00Z --execute   # the reset
dedup offsets reset --config dedup.yaml --to earliest --partition 0,3 --execute`,
		flags: func(fs *flag.FlagSet) func(context.Context, *Tool, []string) (any, int, error) {
			to := fs.String("to", "", "earliest, latest, a time (RFC 3339) or an offset (required)")
			topic := fs.String("topic", "", "only this topic (default: the config's topics)")
			partitions := fs.String("partition", "", "only these partitions, comma-separated")
			dryRun := planFlags(fs)
			return func(ctx context.Context, t *Tool, args []string) (any, int, error) {
				if len(args) > 0 {
					return nil, ExitError, fmt.Errorf("unexpected arguments %q", args)
				}
				dry, err := dryRun()
				if err != nil {
					return nil, ExitError, err
				}
				target, err := parseTarget(*to)
				if err != nil {
					return nil, ExitError, err
				}
				topics := t.cfg.Kafka.Topics
				if *topic != "" {
					if !slices.Contains(topics, *topic) {
						return nil, ExitError, fmt.Errorf("--topic %s is not one of the config's topics %v", *topic, topics)
					}
					topics = []string{*topic}
				}
				var parts []int32
				if *partitions != "" {
					for _, s := range strings.Split(*partitions, ",") {
						p, err := strconv.ParseInt(strings.TrimSpace(s), 10, 32)
						if err != nil || p < 0 {
							return nil, ExitError, fmt.Errorf("--partition: %q is not a partition number", s)
						}
						parts = append(parts, int32(p))
					}
				}
				return t.ResetOffsets(ctx, target, topics, parts, dry)
			}
		},
	}
}

// Target is where offsets reset moves to: one of Earliest, Latest, a
// time or an offset.
type Target struct {
	Earliest, Latest bool
	Time             *time.Time
	Offset           *int64
}

func (t Target) String() string {
	switch {
	case t.Earliest:
		return "earliest"
	case t.Latest:
		return "latest"
	case t.Time != nil:
		return t.Time.UTC().Format(time.RFC3339Nano)
	}
	return strconv.FormatInt(*t.Offset, 10)
}

// parseTarget reads --to.
func parseTarget(s string) (Target, error) {
	switch s {
	case "":
		return Target{}, errors.New("--to is required: earliest, latest, a time (RFC 3339) or an offset")
	case "earliest":
		return Target{Earliest: true}, nil
	case "latest":
		return Target{Latest: true}, nil
	}
	if o, err := strconv.ParseInt(s, 10, 64); err == nil {
		if o < 0 {
			return Target{}, fmt.Errorf("--to %d: an offset is not negative", o)
		}
		return Target{Offset: &o}, nil
	}
	if tm, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return Target{Time: &tm}, nil
	}
	return Target{}, fmt.Errorf("--to %q: want earliest, latest, a time (RFC 3339, 2026-03-01T00:00:00Z) or an offset", s)
}

// ResetReport is dedup offsets reset's answer.
type ResetReport struct {
	Group      string          `json:"group"`
	To         string          `json:"to"`
	DryRun     bool            `json:"dry_run"`
	Partitions []PartitionMove `json:"partitions"`
	// Forecast is what the re-read records will do (dry runs only).
	Forecast *Forecast `json:"forecast,omitempty"`
	Notes    []string  `json:"notes,omitempty"`
}

// PartitionMove is one partition's move.
type PartitionMove struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	// From is where the group resumes now: its committed offset, or where
	// kafka.reset_offset starts a partition without one.
	From      int64 `json:"from"`
	Committed bool  `json:"committed"` // From is a committed offset
	To        int64 `json:"to"`
	// Reread and Skipped count offsets: records, and where transactions
	// wrote, their markers and aborted records too (the forecast counts
	// the records).
	Reread  int64 `json:"reread"`  // offsets read again (To < From)
	Skipped int64 `json:"skipped"` // offsets the group will never read (To > From)
}

// ResetOffsets answers dedup offsets reset.
func (t *Tool) ResetOffsets(ctx context.Context, to Target, topics []string, parts []int32, dryRun bool) (*ResetReport, int, error) {
	adm, err := t.kafka()
	if err != nil {
		return nil, ExitError, err
	}
	g := t.cfg.Kafka.Group
	rep := &ResetReport{Group: g, To: to.String(), DryRun: dryRun, Partitions: []PartitionMove{}}
	if err := t.refuseLiveMembers(ctx, adm); err != nil {
		return rep, ExitError, err
	}
	bs, err := t.partitionBounds(ctx, topics...)
	if err != nil {
		return rep, ExitError, err
	}
	for _, p := range parts {
		for _, topic := range topics {
			if _, ok := bs[topic][p]; !ok {
				return rep, ExitError, fmt.Errorf("--partition %d: topic %s has no such partition", p, topic)
			}
		}
	}
	cm, err := t.committed(ctx)
	if err != nil {
		return rep, ExitError, err
	}
	var at kadm.ListedOffsets
	if to.Time != nil {
		if at, err = adm.ListOffsetsAfterMilli(ctx, to.Time.UnixMilli(), topics...); err != nil {
			return rep, ExitError, fmt.Errorf("listing offsets at %s: %w", to, err)
		}
	}
	for _, topic := range topics {
		for p, b := range bs[topic] {
			if len(parts) > 0 && !slices.Contains(parts, p) {
				continue
			}
			mv, note, err := t.planMove(to, topic, p, b, cm, at)
			if err != nil {
				return rep, ExitError, err
			}
			if note != "" {
				rep.Notes = append(rep.Notes, note)
			}
			rep.Partitions = append(rep.Partitions, mv)
		}
	}
	sort.Slice(rep.Partitions, func(i, j int) bool {
		a, b := rep.Partitions[i], rep.Partitions[j]
		return a.Topic < b.Topic || a.Topic == b.Topic && a.Partition < b.Partition
	})
	skipped := int64(0)
	for _, mv := range rep.Partitions {
		skipped += mv.Skipped
	}
	if skipped > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("%d offsets are skipped: the group will never read their records, no workflow starts for them", skipped))
	}
	if dryRun {
		stable := map[string]map[int32]int64{}
		for topic, ps := range bs {
			stable[topic] = map[int32]int64{}
			for p, b := range ps {
				stable[topic][p] = b.stable
			}
		}
		f, notes, err := t.forecast(ctx, rep.Partitions, stable)
		rep.Forecast = f
		rep.Notes = append(rep.Notes, notes...)
		if err != nil {
			return rep, ExitError, err
		}
		if f.NewWorkflows > 0 {
			rep.Notes = append(rep.Notes, "new workflows are the workflow IDs the ledger does not know (never claimed, or purged): "+
				"Temporal still refuses those whose run it keeps under reject_duplicate (already started)")
		}
		return rep, ExitFound, nil
	}
	var os kadm.Offsets
	for _, mv := range rep.Partitions {
		os.Add(kadm.Offset{Topic: mv.Topic, Partition: mv.Partition, At: mv.To, LeaderEpoch: -1})
	}
	resp, err := adm.CommitOffsets(ctx, g, os)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		return rep, ExitError, fmt.Errorf("committing the new offsets of group %s (a member may have joined meanwhile): %w", g, err)
	}
	for _, mv := range rep.Partitions {
		t.log.Info("offsets reset", "group", g, "topic", mv.Topic, "partition", mv.Partition, "from", mv.From,
			"from_committed", mv.Committed, "to", mv.To, "reread", mv.Reread, "skipped", mv.Skipped, "target", rep.To)
	}
	// A member that joined between the check and the commit would commit
	// over the reset: say so.
	if err := t.refuseLiveMembers(ctx, adm); err != nil {
		rep.Notes = append(rep.Notes, "after the reset: "+err.Error()+"; check the offsets with dedup lag")
	}
	return rep, ExitFound, nil
}

// planMove is the move of partition topic/p (bounds b) to the target:
// from the group's committed offset (cm), or where a group without one
// starts, and what the group then reads again or skips; note is for an
// offset outside the log.
func (t *Tool) planMove(to Target, topic string, p int32, b bounds, cm map[string]map[int32]int64, at kadm.ListedOffsets) (mv PartitionMove, note string, err error) {
	mv = PartitionMove{Topic: topic, Partition: p}
	// The end, for the group, is where its consumer (under
	// kafka.isolation_level) reads up to: under read_committed
	// the last stable offset; past it, a transaction still open
	// would be skipped once it commits.
	if c, ok := cm[topic][p]; ok {
		mv.From, mv.Committed = c, true
	} else if t.cfg.Kafka.ResetOffset == "earliest" {
		mv.From = b.start
	} else {
		mv.From = b.stable
	}
	switch {
	case to.Earliest:
		mv.To = b.start
	case to.Latest:
		mv.To = b.stable
	case to.Time != nil:
		o, ok := at.Lookup(topic, p)
		if !ok || o.Err != nil {
			return mv, "", fmt.Errorf("no offset of %s/%d at %s", topic, p, to)
		}
		mv.To = o.Offset
		if mv.To >= b.end {
			mv.To = b.stable // no record at or after the time: the end
		}
	default:
		mv.To = min(max(*to.Offset, b.start), b.end)
		if mv.To != *to.Offset {
			note = fmt.Sprintf("%s/%d: offset %d is outside the log %d..%d: moved to %d", topic, p, *to.Offset, b.start, b.end, mv.To)
		}
	}
	// What the group reads from To: at least the log start.
	from := max(mv.From, b.start)
	if mv.To < from {
		mv.Reread = from - mv.To
	} else {
		mv.Skipped = mv.To - from
	}
	return mv, note, nil
}

// refuseLiveMembers fails when the group has members.
func (t *Tool) refuseLiveMembers(ctx context.Context, adm *kadm.Client) error {
	owners, state, members, err := t.owners(ctx, adm)
	if err != nil {
		return err
	}
	if members == 0 {
		return nil
	}
	var who []string
	seen := map[string]bool{}
	for _, ps := range owners {
		for _, o := range ps {
			if !seen[o] {
				seen[o] = true
				who = append(who, o)
			}
		}
	}
	sort.Strings(who)
	return fmt.Errorf("group %s has %d live member(s) (state %s; %s): stop every replica first, their commits would overwrite the reset",
		t.cfg.Kafka.Group, members, state, strings.Join(who, ", "))
}
