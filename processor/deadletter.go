package processor

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/schemas"
)

// deadLetter is one record to dead-letter: for per-workflow reasons
// (conflict, temporal_permanent) workflow names the workflow; eventID and
// rule, when the record decoded, are for the decision log only.
type deadLetter struct {
	rec           *record
	reason        decide.Reason
	err           error
	workflow      string
	eventID, rule string
}

// deadLetterWriter writes records that can never succeed to the
// dead-letter topic. Its guarantee: a record is finished only once its
// dead letter is acknowledged by Kafka and logged in the DeadLetterLog;
// a redelivered record that the log says was written is not written
// again (a crash between the write and the log can still duplicate one:
// the log narrows that to one batch). The dead letter's dedup-* headers
// (schemas.DeadLetterHeaders) are the router's only: the original's own
// headers of those names are left out. One the topic refuses as too large
// is written again without the value (header dedup-value-dropped, and
// dedup-original-sha256, the digest replay checks the original against),
// then, still too large, without the key and the original headers too
// (dedup-key-dropped, dedup-headers-dropped): a summary, keeping its
// reason, the coordinates, the original's dedup-origin-* headers (what
// finds the original, which replay reads from the source topic) and the
// error and workflow ID within summaryHeaderBytes (cut when they must:
// dedup-workflow-id-cut; the whole ID is in the dead-letter log). A
// summary fits a topic that takes a kilobyte whatever the ID and the
// error, as long as the source and origin topics' names take under 450
// bytes together. A dead letter too large even then is logged with the
// reason and leaves its record unfinished: that partition stops committing
// there, the others go on. On shutdown or revoke the records are
// abandoned, uncommitted.
type deadLetterWriter struct {
	trace  *routerTracer // nil: off
	cfg    Config
	log    *slog.Logger
	m      *metrics
	cl     *kgo.Client
	dlqLog DeadLetterLog
	health *health
	end    func(rec *record, ok bool)
}

// write dead-letters dls and ends their records, each ok when its dead
// letter was written (or had been); it reports whether all were.
func (w *deadLetterWriter) write(ctx context.Context, dls []deadLetter) bool {
	errs, err := w.putEach(ctx, dls)
	for i, d := range dls {
		w.end(d.rec, err == nil && errs[i] == nil)
	}
	return err == nil && !slices.ContainsFunc(errs, func(e error) bool { return e != nil })
}

// put dead-letters dls without ending their records (the caller ends them,
// once what else the record needs is done too). It returns nil when all
// were written (or had been), else the first error (a Permanent one for a
// dead letter the topic can never take).
func (w *deadLetterWriter) put(ctx context.Context, dls []deadLetter) error {
	errs, err := w.putEach(ctx, dls)
	if err != nil {
		return err
	}
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

// putEach is put with an answer per dead letter: err is an error of the
// whole call (a dependency, the context); otherwise errs[i] is non-nil
// for a dead letter the topic can never take (Permanent), nil for one
// written (or that had been).
func (w *deadLetterWriter) putEach(ctx context.Context, dls []deadLetter) (errs []error, err error) {
	if w.trace != nil {
		defer w.trace.deadLettered(dls, time.Now(), &errs, &err)
	}
	entries := make([]DeadLetter, len(dls))
	for i, d := range dls {
		src := d.rec.kr
		entries[i] = DeadLetter{Topic: src.Topic, Partition: src.Partition, Offset: src.Offset, WorkflowID: d.workflow,
			Reason: string(d.reason), Error: d.err.Error(), DLQTopic: w.cfg.DeadLetterTopicFor(src.Topic)}
	}
	var written []bool
	err = w.health.retry(ctx, OpDeadLetterLog, func(ctx context.Context) error {
		var err error
		written, err = w.dlqLog.Written(ctx, entries)
		return err
	})
	if err != nil {
		return nil, err
	}
	errs = make([]error, len(dls))
	var out []*outgoing
	for i := range dls {
		if !written[i] {
			out = append(out, &outgoing{i: i, d: &dls[i], topic: entries[i].DLQTopic})
		}
	}
	if len(out) == 0 {
		return errs, nil
	}
	if err := w.produce(ctx, out); err != nil {
		return nil, err
	}
	var fresh []DeadLetter
	var freshOut []*outgoing
	for _, o := range out {
		if o.err != nil {
			errs[o.i] = o.err
			src := o.d.rec.kr
			w.log.Error("dead letter refused by its topic for good: the partition stops at this record until the topic takes it",
				"reason", string(o.d.reason), "topic", src.Topic, "partition", src.Partition, "offset", src.Offset,
				"dlq_topic", o.topic, "err", o.err)
			continue
		}
		fresh = append(fresh, entries[o.i])
		freshOut = append(freshOut, o)
	}
	if len(fresh) == 0 {
		return errs, nil
	}
	if err := w.health.retry(ctx, OpDeadLetterLog, func(ctx context.Context) error { return w.dlqLog.Record(ctx, fresh) }); err != nil {
		return nil, err
	}
	for i, f := range fresh {
		w.m.deadLetters.WithLabelValues(f.Reason).Inc()
		// The decision log's line for this record: once, when the write
		// is acknowledged and logged (a redelivery that finds it written
		// logs nothing). A conflict is its own decision.
		decision := "dead_letter"
		if f.Reason == string(decide.ReasonConflict) {
			decision = "conflict"
		}
		d := freshOut[i]
		logDecision(w.log, slog.LevelWarn, decision,
			decisionOf{eventID: d.d.eventID, rule: d.d.rule, topic: f.Topic, partition: f.Partition, offset: f.Offset},
			"reason", f.Reason, "workflow_id", f.WorkflowID, "dlq_topic", f.DLQTopic, "err", f.Error, "reduced", d.level.String())
	}
	return errs, nil
}

// reduction is how much of the original a dead letter carries: each step
// is taken only when the dead-letter topic refused the one before as too
// large.
type reduction int

const (
	whole      reduction = iota // key, value, headers
	noValue                     // key and headers; dedup-value-dropped
	summarised                  // reason, coordinates, dedup-origin-*, error and workflow ID (cut to fit); dedup-key-dropped, dedup-headers-dropped
)

func (r reduction) String() string {
	return [...]string{"none", "value", "value,key,headers"}[r]
}

// maxErrorBytes bounds the error text of a summarised dead letter.
const maxErrorBytes = 512

// summaryHeaderBytes bounds a summary's headers (names and values): the
// workflow ID and the error text take what the others leave, cut when
// they must (dedup-workflow-id-cut; the error ends with "…"). With Kafka's
// framing (61 bytes of batch header, about 50 of the record's and its
// headers' lengths) the summary stays under 1,024 bytes: it fits a topic
// that takes a kilobyte, as long as the source topic's name and the
// origin's (dedup-origin-topic) take under 450 bytes together (each is at
// most 249).
const summaryHeaderBytes = 900

// outgoing is one dead letter on its way: its reduction, and for one the
// topic can never take, why.
type outgoing struct {
	i     int // in put's dls
	d     *deadLetter
	topic string
	level reduction
	err   error
}

// kafkaRecord is o's dead letter at its reduction: the original key, value
// and headers (as far as kept), plus the reason and the record's
// coordinates. It is built afresh for each try, in bytes of its own: a
// Produce its context gave up on may still be sent after the source
// record ended and its memory went back to the fetch pools
// (fetchpools.go).
func (o *outgoing) kafkaRecord() *kgo.Record {
	d, src := o.d, o.d.rec.kr
	kr := &kgo.Record{Topic: o.topic}
	switch o.level {
	case whole:
		kr.Key, kr.Value = bytes.Clone(src.Key), bytes.Clone(src.Value)
		kr.Headers = ownHeaders(src.Headers)
	case noValue:
		kr.Key = bytes.Clone(src.Key)
		kr.Headers = ownHeaders(src.Headers)
	case summarised:
		for _, h := range src.Headers {
			switch h.Key {
			case schemas.HeaderOriginTopic, schemas.HeaderOriginPartition, schemas.HeaderOriginOffset:
				if len(h.Value) <= 255 { // a topic name, a number
					kr.Headers = append(kr.Headers, kgo.RecordHeader{Key: h.Key, Value: bytes.Clone(h.Value)})
				}
			}
		}
	}
	kr.Headers = append(kr.Headers,
		kgo.RecordHeader{Key: schemas.HeaderDLQReason, Value: []byte(d.reason)},
		kgo.RecordHeader{Key: schemas.HeaderDLQTopic, Value: []byte(src.Topic)},
		kgo.RecordHeader{Key: schemas.HeaderDLQPartition, Value: []byte(strconv.Itoa(int(src.Partition)))},
		kgo.RecordHeader{Key: schemas.HeaderDLQOffset, Value: []byte(strconv.FormatInt(src.Offset, 10))},
		kgo.RecordHeader{Key: schemas.HeaderDLQTimestamp, Value: []byte(src.Timestamp.UTC().Format("2006-01-02T15:04:05.000Z07:00"))},
	)
	if o.level >= noValue {
		kr.Headers = append(kr.Headers,
			kgo.RecordHeader{Key: schemas.HeaderDLQValueDropped, Value: []byte(strconv.Itoa(len(src.Value)))},
			kgo.RecordHeader{Key: schemas.HeaderDLQOriginalSHA256, Value: []byte(schemas.OriginalSHA256(src.Key, src.Value, headerSeq(src.Headers)))})
	}
	if o.level >= summarised {
		kr.Headers = append(kr.Headers,
			kgo.RecordHeader{Key: schemas.HeaderDLQKeyDropped, Value: []byte(strconv.Itoa(len(src.Key)))},
			kgo.RecordHeader{Key: schemas.HeaderDLQHeadersDropped, Value: []byte(strconv.Itoa(len(src.Headers)))})
	}
	errText, workflow := d.err.Error(), d.workflow
	if o.level >= summarised {
		var cut bool
		errText, workflow, cut = summaryTexts(kr.Headers, errText, workflow)
		if cut {
			kr.Headers = append(kr.Headers, kgo.RecordHeader{Key: schemas.HeaderDLQWorkflowCut, Value: []byte(strconv.Itoa(len(d.workflow)))})
		}
	}
	kr.Headers = append(kr.Headers, kgo.RecordHeader{Key: schemas.HeaderDLQError, Value: []byte(errText)})
	if workflow != "" {
		kr.Headers = append(kr.Headers, kgo.RecordHeader{Key: schemas.HeaderDLQWorkflow, Value: []byte(workflow)})
	}
	return kr
}

// ownHeaders are a record's headers for its dead letter, their values
// copied (kafkaRecord): all of them but
// those of the names the router sets (schemas.DeadLetterHeaders), which
// only the router writes: a record carrying its own dedup-topic or
// dedup-reason (a producer's, or a dead letter copied back by hand) does
// not speak for the router.
func ownHeaders(hs []kgo.RecordHeader) []kgo.RecordHeader {
	out := make([]kgo.RecordHeader, 0, len(hs)+8)
	for _, h := range hs {
		if !slices.Contains(schemas.DeadLetterHeaders, h.Key) {
			out = append(out, kgo.RecordHeader{Key: h.Key, Value: bytes.Clone(h.Value)})
		}
	}
	return out
}

// headerSeq is hs as the pairs schemas.OriginalSHA256 reads.
func headerSeq(hs []kgo.RecordHeader) iter.Seq2[string, []byte] {
	return func(yield func(string, []byte) bool) {
		for _, h := range hs {
			if !yield(h.Key, h.Value) {
				return
			}
		}
	}
}

// summaryTexts are the error text and workflow ID of a summary whose
// other headers are hs, within summaryHeaderBytes: the error cut to
// maxErrorBytes, then both to what hs leave (the workflow ID to half of
// it at most, so that the error, which says why, keeps the rest); cut says
// whether the workflow ID was.
func summaryTexts(hs []kgo.RecordHeader, errText, workflow string) (string, string, bool) {
	left := summaryHeaderBytes - len(schemas.HeaderDLQError) - len("…")
	for _, h := range hs {
		left -= len(h.Key) + len(h.Value)
	}
	cut := false
	if workflow != "" {
		left -= len(schemas.HeaderDLQWorkflow)
		if n := max(left/2, 0); len(workflow) > n {
			left -= len(schemas.HeaderDLQWorkflowCut) + len(strconv.Itoa(len(workflow)))
			workflow, cut = cutUTF8(workflow, max(min(n, left), 0)), true
		}
		left -= len(workflow)
	}
	if n := max(min(left, maxErrorBytes), 0); len(errText) > n {
		errText = cutUTF8(errText, n) + "…"
	}
	return errText, workflow, cut
}

// cutUTF8 is s cut to at most n bytes, at a character boundary.
func cutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "")
}

// tooLarge reports whether Kafka (or the client, before sending) refused
// a record or its batch as too large: it never heals for that record.
func tooLarge(err error) bool {
	return errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.RecordListTooLarge)
}

// produce sends out until every dead letter is acknowledged or known to
// never fit (its err set, Permanent); only what failed is sent again. A
// dead letter refused as too large is sent again alone (it may have
// shared a batch that was too large), then reduced one step at a time.
func (w *deadLetterWriter) produce(ctx context.Context, out []*outgoing) error {
	unsent := out
	return w.health.retry(ctx, OpDeadLetter, func(ctx context.Context) error {
		byRecord := make(map[*kgo.Record]*outgoing, len(unsent))
		krs := make([]*kgo.Record, len(unsent))
		for i, o := range unsent {
			krs[i] = o.kafkaRecord()
			byRecord[krs[i]] = o
		}
		var failed []*outgoing
		var first error
		for _, res := range produceSync(ctx, w.cl, krs...) {
			o := byRecord[res.Record]
			err := res.Err
			if err != nil && tooLarge(err) {
				err = w.produceAlone(ctx, o, len(krs) > 1)
			}
			if err == nil || o.err != nil {
				continue
			}
			failed = append(failed, o)
			first = cmp.Or(first, err)
		}
		unsent = failed
		if first != nil {
			return fmt.Errorf("producing %d dead letters: %w", len(failed), first)
		}
		return nil
	})
}

// produceSync is kgo.Client.ProduceSync bounded by ctx. franz-go waits
// for the answer to a Produce already sent whatever its context: a broker
// that holds a dead letter's Produce would hold the poll loop, or a
// worker, and with it the shutdown, past drain_timeout. When ctx ends
// first, the records not answered yet fail with its error (the caller
// leaves their source records uncommitted; a dead letter that lands
// later is written again by the redelivery, as after a crash).
func produceSync(ctx context.Context, cl *kgo.Client, rs ...*kgo.Record) kgo.ProduceResults {
	type answer struct {
		i   int
		err error
	}
	answers := make(chan answer, len(rs)) // a late answer never blocks the client
	for i, r := range rs {
		cl.Produce(ctx, r, func(_ *kgo.Record, err error) { answers <- answer{i, err} })
	}
	results := make(kgo.ProduceResults, len(rs))
	answered := make([]bool, len(rs))
	for i, r := range rs {
		results[i].Record = r
	}
	for range rs {
		select {
		case a := <-answers:
			results[a.i].Err, answered[a.i] = a.err, true
		case <-ctx.Done():
			for i := range results {
				if !answered[i] {
					results[i].Err = ctx.Err()
				}
			}
			return results
		}
	}
	return results
}

// produceAlone sends o by itself, at its reduction (again, when it was
// refused in a batch of others: shared) and then reduced, until the topic
// takes it, refuses it otherwise (that error), or refuses even the
// summary (o.err, permanent; nil returned).
func (w *deadLetterWriter) produceAlone(ctx context.Context, o *outgoing, shared bool) error {
	if !shared {
		o.level++
	}
	for ; o.level <= summarised; o.level++ {
		kr := o.kafkaRecord()
		err := produceSync(ctx, w.cl, kr).FirstErr()
		if err == nil || !tooLarge(err) {
			return err
		}
	}
	o.level = summarised
	size := o.kafkaRecord()
	n := len(size.Topic) // an estimate of the record's size, for the message
	for _, h := range size.Headers {
		n += len(h.Key) + len(h.Value)
	}
	o.err = Permanent(fmt.Errorf("writing the dead letter of %s/%d/%d to %s: refused as too large even reduced to its reason and coordinates "+
		"(about %d bytes of headers; raise the topic's max.message.bytes): %w", o.d.rec.kr.Topic, o.d.rec.kr.Partition, o.d.rec.kr.Offset,
		o.topic, n, kerr.MessageTooLarge))
	return nil
}
