package processor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedupio/dedup/processor/eventid"
	"github.com/dedupio/dedup/schemas"
)

// Reason is why a record was dead-lettered: the value of the dedup-reason
// header, of the reason column of dedup_dead_letters and of the reason
// label of dedup_dead_letters_total. Reasons lists every one.
type Reason string

// The decoder's reasons are eventid's (it cannot import this package);
// the rest are the router's.
const (
	ReasonUndecodable              = Reason(eventid.ReasonUndecodable)  // not JSON, or a field of the wrong type
	ReasonMissingType              = Reason(eventid.ReasonMissingType)  // no event type to route on
	ReasonInvalidID                = Reason(eventid.ReasonInvalidID)    // an ID header or field that is present but unusable
	ReasonNoID                     = Reason(eventid.ReasonNoID)         // no rule of the ID chain produced an ID
	ReasonForgedTenant             = Reason(eventid.ReasonForgedTenant) // a dedup-tenant header without the ingress's signature
	ReasonOversized         Reason = "oversized"                        // over max_value_bytes
	ReasonConflict          Reason = "conflict"                         // the workflow ID was claimed with another payload
	ReasonNoRoute           Reason = "no_route"                         // no route matches (no_route: dead_letter)
	ReasonTemporalPermanent Reason = "temporal_permanent"               // Temporal refused the start for good
)

// Reasons is every dead-letter reason, in documentation order.
var Reasons = []Reason{ReasonUndecodable, ReasonMissingType, ReasonInvalidID, ReasonNoID, ReasonForgedTenant, ReasonOversized,
	ReasonConflict, ReasonNoRoute, ReasonTemporalPermanent}

// deadLetter is one record to dead-letter: for per-workflow reasons
// (conflict, temporal_permanent) workflow names the workflow; eventID and
// rule, when the record decoded, are for the decision log only.
type deadLetter struct {
	rec           *record
	reason        Reason
	err           error
	workflow      string
	eventID, rule string
}

// deadLetterWriter writes records that can never succeed to the
// dead-letter topic. Its guarantee: a record is finished only once its
// dead letter is acknowledged by Kafka and logged in the DeadLetterLog;
// a redelivered record that the log says was written is not written
// again (a crash between the write and the log can still duplicate one:
// the log narrows that to one batch); a value the topic refuses as too
// large is dropped from the dead letter (header dedup-value-dropped)
// rather than block the partition. On shutdown or revoke the records are
// abandoned, uncommitted.
type deadLetterWriter struct {
	cfg    Config
	log    *slog.Logger
	m      *metrics
	cl     *kgo.Client
	dlqLog DeadLetterLog
	health *health
	end    func(rec *record, ok bool)
}

// write dead-letters dls and ends their records; it reports whether all
// were written (or had been).
func (w *deadLetterWriter) write(ctx context.Context, dls []deadLetter) bool {
	err := w.put(ctx, dls)
	for _, d := range dls {
		w.end(d.rec, err == nil)
	}
	return err == nil
}

// put dead-letters dls without ending their records (the caller ends them,
// once what else the record needs is done too). It returns nil when all
// were written (or had been).
func (w *deadLetterWriter) put(ctx context.Context, dls []deadLetter) error {
	entries := make([]DeadLetter, len(dls))
	for i, d := range dls {
		src := d.rec.kr
		entries[i] = DeadLetter{Topic: src.Topic, Partition: src.Partition, Offset: src.Offset, WorkflowID: d.workflow,
			Reason: string(d.reason), Error: d.err.Error(), DLQTopic: w.cfg.DeadLetterTopicFor(src.Topic)}
	}
	var written []bool
	err := w.health.retry(ctx, OpDeadLetterLog, func(ctx context.Context) error {
		var err error
		written, err = w.dlqLog.Written(ctx, entries)
		return err
	})
	var krs []*kgo.Record
	var fresh []DeadLetter
	var freshDLs []*deadLetter
	for i, d := range dls {
		if err != nil || written[i] {
			continue
		}
		krs = append(krs, w.kafkaRecord(d, entries[i].DLQTopic))
		fresh = append(fresh, entries[i])
		freshDLs = append(freshDLs, &dls[i])
	}
	if err == nil && len(krs) > 0 {
		err = w.produce(ctx, krs)
		if err == nil {
			err = w.health.retry(ctx, OpDeadLetterLog, func(ctx context.Context) error { return w.dlqLog.Record(ctx, fresh) })
		}
		if err == nil {
			for i, f := range fresh {
				w.m.deadLetters.WithLabelValues(f.Reason).Inc()
				// The decision log's line for this record: once, when the
				// write is acknowledged and logged (a redelivery that finds
				// it written logs nothing). A conflict is its own decision.
				decision := "dead_letter"
				if f.Reason == string(ReasonConflict) {
					decision = "conflict"
				}
				w.log.Warn("dead-lettered record", "decision", decision, "reason", f.Reason, "workflow_id", f.WorkflowID,
					"event_id", freshDLs[i].eventID, "rule", freshDLs[i].rule,
					"topic", f.Topic, "partition", f.Partition, "offset", f.Offset, "dlq_topic", f.DLQTopic, "err", f.Error)
			}
		}
	}
	return err
}

// kafkaRecord is the dead letter of d: the original key, value and
// headers, plus the reason and the record's coordinates.
func (w *deadLetterWriter) kafkaRecord(d deadLetter, topic string) *kgo.Record {
	src := d.rec.kr
	hs := append([]kgo.RecordHeader(nil), src.Headers...)
	hs = append(hs,
		kgo.RecordHeader{Key: schemas.HeaderDLQReason, Value: []byte(d.reason)},
		kgo.RecordHeader{Key: schemas.HeaderDLQError, Value: []byte(d.err.Error())},
		kgo.RecordHeader{Key: schemas.HeaderDLQTopic, Value: []byte(src.Topic)},
		kgo.RecordHeader{Key: schemas.HeaderDLQPartition, Value: []byte(strconv.Itoa(int(src.Partition)))},
		kgo.RecordHeader{Key: schemas.HeaderDLQOffset, Value: []byte(strconv.FormatInt(src.Offset, 10))},
		kgo.RecordHeader{Key: schemas.HeaderDLQTimestamp, Value: []byte(src.Timestamp.UTC().Format("2006-01-02T15:04:05.000Z07:00"))},
	)
	if d.workflow != "" {
		hs = append(hs, kgo.RecordHeader{Key: schemas.HeaderDLQWorkflow, Value: []byte(d.workflow)})
	}
	return &kgo.Record{Topic: topic, Key: src.Key, Value: src.Value, Headers: hs}
}

// produce sends krs until every one is acknowledged; only what failed is
// sent again.
func (w *deadLetterWriter) produce(ctx context.Context, krs []*kgo.Record) error {
	unsent := krs
	return w.health.retry(ctx, OpDeadLetter, func(ctx context.Context) error {
		var failed []*kgo.Record
		var first error
		for _, res := range w.cl.ProduceSync(ctx, unsent...) {
			if res.Err == nil {
				continue
			}
			if errors.Is(res.Err, kerr.MessageTooLarge) || errors.Is(res.Err, kerr.RecordListTooLarge) {
				// The dead-letter topic will never take this value: record
				// the reason without it (the original stays in the source
				// topic at the offset the headers name) rather than block
				// the partition.
				kr := res.Record
				kr.Headers = append(kr.Headers, kgo.RecordHeader{Key: schemas.HeaderDLQValueDropped, Value: []byte(strconv.Itoa(len(kr.Value)))})
				kr.Value = nil
			}
			failed = append(failed, res.Record)
			if first == nil {
				first = res.Err
			}
		}
		unsent = failed
		if first != nil {
			return fmt.Errorf("producing %d dead letters: %w", len(failed), first)
		}
		return nil
	})
}
