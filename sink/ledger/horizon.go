package ledger

import (
	"cmp"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"
)

// This file is the replay-horizon rule: how long the ledger must keep a
// started row for a replay from a topic's log start never to start a
// workflow twice. dedup run checks it at start, dedup ledger purge before
// it deletes (internal/app reads the retentions it needs).

// Forever stands for "kept forever" (retention.ms -1, postgres.retention 0).
const Forever = time.Duration(math.MaxInt64)

// Horizon is what decides whether a replay from a topic's log start can
// start a workflow a second time: how long the ledger remembers a started
// workflow ID, how long Temporal keeps a closed run (and so, under
// reject_duplicate, refuses its ID), and how long each topic's log may
// keep a record.
//
// The rule: whatever remembers an event (the ledger, or Temporal under
// reject_duplicate) must remember it longer than any copy of it can stay
// in a topic. A started row is purged postgres.retention after its start,
// which comes after its record's timestamp. Kafka deletes a record with its
// segment, once the segment's newest record is older than retention.ms; a
// segment takes records for up to segment.ms (segment.bytes may close it
// sooner, never later). So a record stays up to retention.ms + segment.ms
// after its timestamp, and the memory must be longer than that. What dedup
// cannot read is the operator's to add: how long after the first copy a
// producer may re-send an event (the copy lives from its own timestamp),
// producers' clocks ahead of the brokers' (CreateTime), and the brokers'
// log.retention.check.interval.ms. A topic whose retention.ms is -1, or
// that is compacted and not deleted (cleanup.policy compact), keeps records
// forever: no memory short of forever covers it.
type Horizon struct {
	Ledger time.Duration // postgres.retention; Forever when 0
	// LedgerBy names the setting Ledger comes from (postgres.retention
	// when empty; dedup ledger purge says --older-than).
	LedgerBy  string
	Namespace time.Duration             // the namespace's workflow execution retention
	Topics    map[string]TopicRetention // per source topic
	// OnlyLedger is set when a route's reuse policy lets Temporal start a
	// closed ID again (allow_*): then only the ledger guards replays.
	OnlyLedger bool
}

// TopicRetention is what decides how long a topic keeps a record.
type TopicRetention struct {
	Retention time.Duration // retention.ms; Forever for -1
	Segment   time.Duration // segment.ms
	// Compacted: cleanup.policy has compact and not delete: the newest
	// record of each key is kept whatever retention.ms says.
	Compacted bool
}

// Keeps is how long after its timestamp the topic may keep a record:
// retention.ms + segment.ms, or forever.
func (r TopicRetention) Keeps() time.Duration {
	if r.Compacted || r.Retention == Forever || r.Segment == Forever || r.Retention > Forever-r.Segment {
		return Forever
	}
	return r.Retention + r.Segment
}

func (r TopicRetention) String() string {
	switch {
	case r.Compacted:
		return "cleanup.policy compact: the newest record of each key is kept forever"
	case r.Retention == Forever:
		return "retention.ms -1: kept forever"
	}
	return fmt.Sprintf("retention.ms %s + segment.ms %s: a record stays up to %s", span(r.Retention), span(r.Segment), span(r.Keeps()))
}

// Check says, naming the settings, how a replay from a log start could
// re-open duplicates; nil when it cannot.
func (h Horizon) Check() error {
	ledgerBy := cmp.Or(h.LedgerBy, "postgres.retention")
	guard, by := h.Ledger, ledgerBy
	if !h.OnlyLedger && h.Namespace > guard {
		guard, by = h.Namespace, "the Temporal namespace retention"
	}
	if guard == Forever {
		return nil
	}
	topics := make([]string, 0, len(h.Topics))
	for t := range h.Topics {
		topics = append(topics, t)
	}
	sort.Strings(topics)
	var short []string
	for _, t := range topics {
		if r := h.Topics[t]; r.Keeps() >= guard {
			short = append(short, fmt.Sprintf("%s (%s)", t, r))
		}
	}
	if len(short) == 0 {
		return nil
	}
	why := ""
	if h.OnlyLedger {
		why = " (a route uses an allow_* reuse policy, so Temporal does not refuse a closed ID)"
	}
	fix := "set postgres.retention to 0 (keep rows forever) or"
	if h.LedgerBy != "" {
		fix = "use " + h.LedgerBy
	}
	return fmt.Errorf("%s: events older than %s (%s%s) are forgotten, but topics %s may keep them as long or longer "+
		"(Kafka deletes whole segments, once a segment's newest record is older than retention.ms): "+
		"replaying from the log start would start their workflows again; %s longer than each topic's retention.ms + segment.ms "+
		"(plus the longest delay after which your producers re-send an event), lower the topics' segment.ms or retention.ms, "+
		"or accept it with postgres.accept_short_horizon: true", ledgerBy, span(guard), by, why, strings.Join(short, ", "), fix)
}

func span(d time.Duration) string {
	if d == Forever {
		return "forever"
	}
	return d.String()
}
