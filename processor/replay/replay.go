// Package replay sends dead-lettered records back through the dedup gate.
//
// It reads dead-letter topics from the start up to their end offsets as of
// the call (so records dead-lettered again during the replay are not read
// again): under read_committed (kafka.isolation_level; the default here
// too) the committed dead letters, up to the last stable offset (Reader).
// It keeps those whose reason matches, and produces each back to its
// original topic with its original key, value and headers. The router then
// treats it like any record: workflows already started stay skipped by the
// ledger, the others start.
//
// Safe by default: without Options.Execute it produces nothing and the
// Result is the plan (how many records per reason, which are refused and
// why).
//
// The event is sent back whole. A dead letter that lacks part of the
// original (dedup-value-dropped, dedup-key-dropped,
// dedup-headers-dropped: the dead-letter topic refused it whole) is not
// replayed as it is: the original is read from the source topic at the
// coordinates the dead letter names, and sent back as it is there; when
// it is no longer there (retention, compaction) or another record is
// (a recreated topic: its digest differs from the dead letter's
// dedup-original-sha256, or the dead letter has none), the dead letter is
// refused, naming the coordinates. A dead letter whose source topic does
// not exist, or is not among Options.SourceTopics, is refused too.
//
// The origin travels with every copy: a replayed record carries where
// the event was first read in dedup-origin-* headers (so that the
// coordinates ID rule gives it its first ID, not a new one), and a copy
// dead-lettered and replayed again keeps those headers, however many
// round trips it makes.
//
// Replaying is therefore safe to repeat, but a record whose cause is not
// fixed (a conflict, a poison payload) is dead-lettered again: filter by
// reason.
package replay

import (
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

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedupio/dedup/processor/eventid"
	"github.com/dedupio/dedup/processor/tenantsig"
	"github.com/dedupio/dedup/schemas"
)

// Options select what to replay.
type Options struct {
	Brokers []string
	// ClientOpts are the Kafka connection options every dedup client
	// shares (TLS, SASL: processor.Config.ClientOpts); they come after
	// Brokers. The isolation level is IsolationLevel's.
	ClientOpts []kgo.Opt
	// IsolationLevel is what the replay reads of a dead-letter topic
	// written in transactions (kafka.isolation_level): ReadCommitted, the
	// committed dead letters up to the last stable offset, or
	// ReadUncommitted, every one up to the high watermark. Required: the
	// replay assumes neither.
	IsolationLevel string
	// DeadLetterTopics to read.
	DeadLetterTopics []string
	// SourceTopics are the topics a dead letter may be sent back to (the
	// topics the routers read: kafka.topics); a dead letter of another
	// topic is refused. Empty: any topic that exists.
	SourceTopics []string
	// Reasons to replay; empty means all.
	Reasons []string
	// Execute produces the records; without it Run only plans (reads the
	// dead letters and, for those that lack part of the original, the
	// source topic) and produces nothing.
	Execute bool
	// Limit stops after this many replayed records; 0 means no limit.
	Limit int
	// Idle is how long the replay waits for a dead letter of a partition
	// it has not read to its end before it ends that partition, when Kafka
	// still answers (Reader.Idle; DefaultIdle when 0).
	Idle time.Duration
}

// Result is what a replay did, or, without Options.Execute, its plan.
type Result struct {
	// Executed says whether records were produced (Options.Execute).
	Executed bool `json:"executed"`
	// Read is how many dead letters were read.
	Read int `json:"read"`
	// Replayed: reason -> records sent back (or to be, in a plan).
	Replayed map[string]int `json:"replayed"`
	// FromSource: reason -> of Replayed, those whose dead letter lacks part
	// of the original, sent back as read from the source topic.
	FromSource map[string]int `json:"from_source"`
	// Skipped: reason -> dead letters the --reason filter or the limit
	// left.
	Skipped map[string]int `json:"skipped"`
	// Refused are the dead letters that cannot be replayed, and why.
	Refused []Refusal `json:"refused"`
	// Stalls are dead-letter partitions ended before their end offset
	// (Reader.Stalls).
	Stalls []string `json:"stalls,omitempty"`
}

// Refusal is a dead letter not replayed, and why.
type Refusal struct {
	// DeadLetter is the dead letter's topic/partition/offset.
	DeadLetter string `json:"dead_letter"`
	Reason     string `json:"reason"`
	// Original is where the router read the record (topic/partition/offset),
	// when the dead letter says.
	Original string `json:"original,omitempty"`
	Why      string `json:"why"`
}

// The values of Options.IsolationLevel: kafka.isolation_level's.
const (
	ReadCommitted   = "read_committed"
	ReadUncommitted = "read_uncommitted"
)

// Run replays (or, without o.Execute, plans).
func Run(ctx context.Context, o Options, log *slog.Logger) (Result, error) {
	res := Result{Executed: o.Execute, Replayed: map[string]int{}, FromSource: map[string]int{}, Skipped: map[string]int{}, Refused: []Refusal{}}
	if len(o.DeadLetterTopics) == 0 {
		return res, errors.New("no dead-letter topics to read")
	}
	var isolation kgo.IsolationLevel
	switch o.IsolationLevel {
	case ReadCommitted: // an aborted dead letter was never written
		isolation = kgo.ReadCommitted()
	case ReadUncommitted:
		isolation = kgo.ReadUncommitted()
	default:
		return res, fmt.Errorf("replay.Options.IsolationLevel: %q, want %s or %s", o.IsolationLevel, ReadCommitted, ReadUncommitted)
	}
	committed := o.IsolationLevel == ReadCommitted
	opts := append(append([]kgo.Opt{kgo.SeedBrokers(o.Brokers...), kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil))},
		o.ClientOpts...), kgo.FetchIsolationLevel(isolation))
	spans, err := deadLetterSpans(ctx, opts, committed, o.DeadLetterTopics)
	if err != nil {
		return res, err
	}
	rd, err := NewReader(opts, spans)
	if err != nil {
		return res, err
	}
	defer rd.Close()
	rd.Idle = o.Idle
	src := &sourceReader{opts: opts, adm: kadm.NewClient(rd.Client()), idle: o.Idle, allowed: o.SourceTopics, exists: map[string]bool{}}
	want := map[string]bool{}
	for _, r := range o.Reasons {
		want[r] = true
	}
	for !rd.Done() {
		recs, err := rd.Poll(ctx, 0)
		if err != nil {
			return res, err
		}
		var out []*kgo.Record
		for _, r := range recs {
			res.Read++
			reason := header(r, schemas.HeaderDLQReason)
			if (len(want) > 0 && !want[reason]) || (o.Limit > 0 && total(res.Replayed) >= o.Limit) {
				res.Skipped[reason]++
				continue
			}
			rec, fromSource, err := rebuild(ctx, r, src)
			if err != nil {
				var refused refusal
				if !errors.As(err, &refused) {
					return res, err
				}
				ref := Refusal{DeadLetter: coords(r.Topic, r.Partition, r.Offset), Reason: reason, Original: originalCoords(r), Why: refused.why}
				log.Warn("dead letter not replayable", "dead_letter", ref.DeadLetter, "reason", reason, "original", ref.Original, "why", ref.Why)
				res.Refused = append(res.Refused, ref)
				continue
			}
			res.Replayed[reason]++
			if fromSource {
				res.FromSource[reason]++
			}
			out = append(out, rec)
		}
		if len(out) > 0 && o.Execute {
			if err := rd.Client().ProduceSync(ctx, out...).FirstErr(); err != nil {
				return res, fmt.Errorf("producing replayed records: %w", err)
			}
		}
	}
	for _, s := range rd.Stalls {
		log.Warn("dead-letter partition ended before its end offset", "stall", s.String())
		res.Stalls = append(res.Stalls, s.String())
	}
	return res, nil
}

// deadLetterSpans are the dead-letter topics' partitions from their log
// start to where a consumer of opts' isolation level can read them now
// (Ends): dead letters written during the replay are not read.
func deadLetterSpans(ctx context.Context, opts []kgo.Opt, committed bool, topics []string) (map[string]map[int32]Span, error) {
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("creating kafka client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	starts, err := adm.ListStartOffsets(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("listing dead-letter start offsets: %w", err)
	}
	ends, err := Ends(ctx, adm, committed, topics...)
	if err != nil {
		return nil, fmt.Errorf("listing dead-letter end offsets: %w", err)
	}
	spans := map[string]map[int32]Span{}
	var first error
	ends.Each(func(e kadm.ListedOffset) {
		s, ok := starts.Lookup(e.Topic, e.Partition)
		switch {
		case e.Err != nil:
			first = cmp.Or(first, fmt.Errorf("end offset of %s/%d: %w", e.Topic, e.Partition, e.Err))
		case !ok || s.Err != nil:
			first = cmp.Or(first, fmt.Errorf("start offset of %s/%d: missing", e.Topic, e.Partition))
		case s.Offset < e.Offset:
			if spans[e.Topic] == nil {
				spans[e.Topic] = map[int32]Span{}
			}
			spans[e.Topic][e.Partition] = Span{From: s.Offset, Until: e.Offset}
		}
	})
	return spans, first
}

// refusal is why a dead letter cannot be replayed (a Refusal, not an
// error of the run).
type refusal struct{ why string }

func (r refusal) Error() string { return r.why }

func refuse(format string, args ...any) error { return refusal{fmt.Sprintf(format, args...)} }

func coords(topic string, partition int32, offset int64) string {
	return fmt.Sprintf("%s/%d/%d", topic, partition, offset)
}

// originalCoords is where the router read the dead letter's record, as
// its headers say ("" without them).
func originalCoords(dl *kgo.Record) string {
	t, p, o := header(dl, schemas.HeaderDLQTopic), header(dl, schemas.HeaderDLQPartition), header(dl, schemas.HeaderDLQOffset)
	if t == "" {
		return ""
	}
	return t + "/" + p + "/" + o
}

// reduced says whether dl lacks part of the original (the dead-letter
// topic refused it whole): which part, for a refusal's text.
func reduced(dl *kgo.Record) string {
	var parts []string
	for _, h := range []struct{ key, what string }{{schemas.HeaderDLQValueDropped, "value"}, {schemas.HeaderDLQKeyDropped, "key"},
		{schemas.HeaderDLQHeadersDropped, "headers"}} {
		if _, ok := lookup(dl, h.key); ok {
			parts = append(parts, h.what)
		}
	}
	return strings.Join(parts, ", ")
}

// rebuild is the record to send back for the dead letter dl: the original
// as the dead letter carries it, or, when it lacks part of it, as the
// source topic still holds it (fromSource). A refusal error when neither
// is possible.
func rebuild(ctx context.Context, dl *kgo.Record, src *sourceReader) (rec *kgo.Record, fromSource bool, err error) {
	topic := header(dl, schemas.HeaderDLQTopic)
	if topic == "" {
		return nil, false, refuse("no %s header: not written by dedup", schemas.HeaderDLQTopic)
	}
	p, errP := strconv.ParseInt(header(dl, schemas.HeaderDLQPartition), 10, 32)
	off, errO := strconv.ParseInt(header(dl, schemas.HeaderDLQOffset), 10, 64)
	if errP != nil || errO != nil {
		return nil, false, refuse("%s or %s is not a number", schemas.HeaderDLQPartition, schemas.HeaderDLQOffset)
	}
	if err := src.check(ctx, topic); err != nil {
		return nil, false, err
	}
	part := reduced(dl)
	if part == "" {
		return replayed(topic, int32(p), off, dl.Key, dl.Value, dl.Headers), false, nil
	}
	at := coords(topic, int32(p), off)
	orig, why, err := src.read(ctx, topic, int32(p), off)
	if err != nil {
		return nil, false, err
	}
	if orig == nil {
		return nil, false, refuse("the dead letter lacks the original's %s (the dead-letter topic refused it whole) and the original at %s is gone: %s; "+
			"nothing whole is left to replay", part, at, why)
	}
	// The record now at those coordinates must be the original: its
	// digest (key, value, headers) the one the router took of the
	// original. A timestamp alone proves nothing (a producer's, often
	// whole seconds: another event of a recreated topic can share it).
	want, ok := lookup(dl, schemas.HeaderDLQOriginalSHA256)
	if !ok {
		return nil, false, refuse("the dead letter lacks the original's %s and has no %s header (written by a dedup before it had one): "+
			"nothing proves the record now at %s is the original; re-produce the event from its producer", part, schemas.HeaderDLQOriginalSHA256, at)
	}
	if got := schemas.OriginalSHA256(orig.Key, orig.Value, headerSeq(orig.Headers)); got != string(want) {
		return nil, false, refuse("the dead letter lacks the original's %s and the record now at %s is another one (its %s is %s, the dead letter's %s: "+
			"the topic was recreated?)", part, at, schemas.HeaderDLQOriginalSHA256, got, want)
	}
	return replayed(topic, int32(p), off, orig.Key, orig.Value, orig.Headers), true, nil
}

// replayed is the record to send to topic for an event read at
// topic/partition/offset with key, value and headers (a dead letter's or
// the original's): the event's own headers, without those dedup's
// dead-lettering added, plus where the event was first read. That is the
// headers' dedup-origin-* when the record was itself a replayed copy (a
// copy dead-lettered again keeps them), else the record's coordinates: so
// the origin travels with every copy, whatever the number of round trips.
func replayed(topic string, partition int32, offset int64, key, value []byte, headers []kgo.RecordHeader) *kgo.Record {
	rec := &kgo.Record{Topic: topic, Key: key, Value: value}
	var origin []kgo.RecordHeader
	for _, h := range headers {
		switch h.Key {
		case schemas.HeaderOriginTopic, schemas.HeaderOriginPartition, schemas.HeaderOriginOffset:
			origin = append(origin, h)
		case eventid.TenantHeader, tenantsig.Header:
			// The event's own headers (its ID is the tenant's, signed by
			// the ingress), not ones dedup's dead-lettering added:
			// replayed, the event keeps its ID and its workflows.
			rec.Headers = append(rec.Headers, h)
		default:
			if !strings.HasPrefix(h.Key, "dedup-") {
				rec.Headers = append(rec.Headers, h)
			}
		}
	}
	if len(origin) != 3 {
		origin = []kgo.RecordHeader{{Key: schemas.HeaderOriginTopic, Value: []byte(topic)},
			{Key: schemas.HeaderOriginPartition, Value: []byte(strconv.Itoa(int(partition)))},
			{Key: schemas.HeaderOriginOffset, Value: []byte(strconv.FormatInt(offset, 10))}}
	}
	rec.Headers = append(rec.Headers, origin...)
	return rec
}

// sourceReader reads single records of the source topics, for dead
// letters that lack part of the original, and says which topics a dead
// letter may go back to.
type sourceReader struct {
	opts    []kgo.Opt
	adm     *kadm.Client
	idle    time.Duration
	allowed []string        // Options.SourceTopics
	exists  map[string]bool // topic -> whether it exists, as first asked
}

// check refuses a dead letter whose source topic is not one of the
// allowed (the routers do not read it: the record would not pass the
// dedup gate) or does not exist (deleted or renamed since: producing to
// it would fail, or create it).
func (s *sourceReader) check(ctx context.Context, topic string) error {
	if len(s.allowed) > 0 && !slices.Contains(s.allowed, topic) {
		return refuse("its source topic %s is not one the routers read (kafka.topics: %s): replayed there it would not pass the dedup gate",
			topic, strings.Join(s.allowed, ", "))
	}
	ok, known := s.exists[topic]
	if !known {
		md, err := s.adm.ListTopics(ctx, topic)
		if err != nil {
			return fmt.Errorf("looking up topic %s: %w", topic, err)
		}
		d, found := md[topic]
		switch {
		case found && d.Err != nil && !errors.Is(d.Err, kerr.UnknownTopicOrPartition):
			return fmt.Errorf("looking up topic %s: %w", topic, d.Err)
		}
		ok = found && d.Err == nil
		s.exists[topic] = ok
	}
	if !ok {
		return refuse("its source topic %s does not exist (deleted or renamed since the record was dead-lettered)", topic)
	}
	return nil
}

// read is the record at topic/partition/offset, or nil and why it is not
// there to read; err is an error of Kafka.
func (s *sourceReader) read(ctx context.Context, topic string, partition int32, offset int64) (*kgo.Record, string, error) {
	starts, err := s.adm.ListStartOffsets(ctx, topic)
	if err != nil {
		return nil, "", fmt.Errorf("listing the start offsets of %s: %w", topic, err)
	}
	start, ok := starts.Lookup(topic, partition)
	switch {
	case !ok || errors.Is(start.Err, kerr.UnknownTopicOrPartition):
		return nil, fmt.Sprintf("topic %s has no partition %d", topic, partition), nil
	case start.Err != nil:
		return nil, "", fmt.Errorf("listing the start offset of %s/%d: %w", topic, partition, start.Err)
	case offset < start.Offset:
		return nil, fmt.Sprintf("the partition starts at offset %d now (retention)", start.Offset), nil
	}
	rd, err := NewReader(s.opts, map[string]map[int32]Span{topic: {partition: {From: offset, Until: offset + 1}}})
	if err != nil {
		return nil, "", err
	}
	defer rd.Close()
	rd.Idle = s.idle
	for !rd.Done() {
		recs, err := rd.Poll(ctx, 0)
		if err != nil {
			return nil, "", fmt.Errorf("reading the original at %s: %w", coords(topic, partition, offset), err)
		}
		for _, r := range recs {
			if r.Offset == offset {
				return r, "", nil
			}
		}
	}
	return nil, "no record to read at that offset (compacted away, or past the partition's end)", nil
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

func header(r *kgo.Record, key string) string {
	v, _ := lookup(r, key)
	return string(v)
}

// lookup is r's last header named key: the router appends its dead
// letter's headers after the original's (and, since it leaves out the
// original's of the same names, a dead letter written before that still
// reads as the router wrote it).
func lookup(r *kgo.Record, key string) ([]byte, bool) {
	for i := len(r.Headers) - 1; i >= 0; i-- {
		if h := r.Headers[i]; h.Key == key {
			return h.Value, true
		}
	}
	return nil, false
}

func total(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
