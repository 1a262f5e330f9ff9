package processor

import (
	"context"
	"log/slog"

	"github.com/dedupio/dedup/processor/decide"
)

// The decision log is one line per decision a router makes of a record's
// workflow ID: new, redrive, rerun, duplicate (sampled: the first of each
// second at info, every one at debug), conflict and dead_letter (once the
// dead letter is written), skipped_no_route (a record no route matches).
// Every line carries the decision, what it is about (attrs: the workflow
// ID and what the decision adds) and the record it came from; logDecision
// writes them all, so that they read alike (docs/runbook.md lists them).

// decisionOf is the record a decision was made of.
type decisionOf struct {
	eventID, rule string
	topic         string
	partition     int32
	offset        int64
}

// logDecision writes the decision log's line for decision, at level: the
// decision, attrs, then the record's event ID, ID rule and coordinates.
// Its message is "decision", or "dead-lettered record" for a dead letter
// or a conflict (logged once its dead letter is written).
func logDecision(log *slog.Logger, level slog.Level, decision string, of decisionOf, attrs ...any) {
	ctx := context.Background()
	if !log.Enabled(ctx, level) {
		return
	}
	msg := "decision"
	if decision == "dead_letter" || decision == "conflict" {
		msg = "dead-lettered record"
	}
	args := make([]any, 0, 2+len(attrs)+10)
	args = append(args, "decision", decision)
	args = append(args, attrs...)
	args = append(args, "event_id", of.eventID, "rule", of.rule, "topic", of.topic, "partition", of.partition, "offset", of.offset)
	log.Log(ctx, level, msg, args...)
}

// intentOf is the record of in.
func intentOf(in *decide.Intent) decisionOf {
	return decisionOf{eventID: in.EventID, rule: in.IDRule, topic: in.Topic, partition: in.Partition, offset: in.Offset}
}
