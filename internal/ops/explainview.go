package ops

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/sink/ledger"
)

// What dedup explain answers: its query, the explanation's types, and the
// views of the record, its decision and its dead letters.

// Query is what dedup explain was asked.
type Query struct {
	Topic      string `json:"topic,omitempty"`
	Partition  *int32 `json:"partition,omitempty"`
	Offset     *int64 `json:"offset,omitempty"`
	EventID    string `json:"event_id,omitempty"`
	WorkflowID string `json:"workflow_id,omitempty"`
	Scan       bool   `json:"scan,omitempty"`
}

// Explanation is dedup explain's answer.
type Explanation struct {
	Query Query `json:"query"`
	// Record is the record explained; nil when no record could be named
	// (a workflow or event the ledger has no row of).
	Record   *Record   `json:"record,omitempty"`
	Decision *Decision `json:"decision,omitempty"`
	Group    *Group    `json:"group,omitempty"`
	// Workflows are the record's workflow IDs (and the one asked for),
	// each with the ledger's and Temporal's view.
	Workflows []Workflow `json:"workflows"`
	// DeadLetters are the record's dead letters written before any claim
	// (decode failures, oversized, no_route); per-workflow ones
	// (conflict, temporal_permanent) are under their workflow.
	DeadLetters []DeadLetter `json:"dead_letters,omitempty"`
	// TemporalQueries find the record's workflows in Temporal
	// (searchattrs.go).
	TemporalQueries []TemporalQuery `json:"temporal_queries,omitempty"`
	// Story is the explanation, in sentences.
	Story []string `json:"story"`
	Found bool     `json:"found"`
	// Errors are the sources that did not answer: the answer is
	// incomplete (exit code 2).
	Errors []string `json:"errors,omitempty"`
}

// Record is the record explained.
type Record struct {
	Coordinates
	// State is where it stands: read, out_of_retention, not_produced,
	// absent, uncommitted (in a transaction still open), unknown.
	State    string `json:"state"`
	LogStart int64  `json:"log_start"`
	LogEnd   int64  `json:"log_end"`
	// LastStable is where the router (kafka.isolation_level) reads the
	// partition up to now: under read_committed, the first offset of the
	// oldest transaction still open (the log end when none is).
	LastStable int64      `json:"last_stable"`
	Timestamp  *time.Time `json:"timestamp,omitempty"`
	Key        string     `json:"key,omitempty"` // as text, or "base64:..." when not UTF-8
	Headers    []Header   `json:"headers,omitempty"`
	ValueBytes int        `json:"value_bytes"`
}

// Header is a record header (values over 200 bytes are cut).
type Header struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// Decision is what the router's code (decide.Decider) makes of the
// record.
type Decision struct {
	Envelope    string `json:"envelope,omitempty"`
	EventID     string `json:"event_id,omitempty"`
	Rule        string `json:"rule,omitempty"`
	IDFrom      string `json:"id_from,omitempty"` // the header or field the ID came from
	Type        string `json:"type,omitempty"`
	Source      string `json:"source,omitempty"`
	Time        string `json:"time,omitempty"`
	PayloadHash string `json:"payload_hash,omitempty"`
	// DeadLetter is the reason the record is dead-lettered before any
	// claim, with Error.
	DeadLetter string `json:"dead_letter,omitempty"`
	Error      string `json:"error,omitempty"`
	// Tombstone: a null value without CloudEvents headers, which the
	// router skips and counts (dedup_records_tombstone_total).
	Tombstone bool `json:"tombstone,omitempty"`
	// NoRoute: no route matches; NoRoutePolicy is kafka.no_route.
	NoRoute       bool         `json:"no_route"`
	NoRoutePolicy string       `json:"no_route_policy,omitempty"`
	Routes        []RouteMatch `json:"routes"`
	// NotMatched are the routes the event does not match, and why
	// (explainmatch.go).
	NotMatched []RouteMiss `json:"not_matched,omitempty"`
}

// RouteMatch is a matching route and the workflow ID it gives: for a
// signal route, the delivery key the ledger claims
// (signal-{route}:{event_id}) and the entity workflow the event is
// signalled into.
type RouteMatch struct {
	Route            Route  `json:"route"`
	WorkflowID       string `json:"workflow_id"`
	EntityWorkflowID string `json:"entity_workflow_id,omitempty"`
}

// Group is the consumer group's progress on the record's partition.
type Group struct {
	Name string `json:"name"`
	// Committed is the group's committed offset (the next record it
	// reads); nil when it has none.
	Committed *int64 `json:"committed,omitempty"`
	// Behind: the record is before the committed offset, so the group
	// read it and finished it.
	Behind bool `json:"behind"`
}

// Workflow is one workflow ID of the record.
type Workflow struct {
	WorkflowID string `json:"workflow_id"`
	Route      *Route `json:"route,omitempty"` // nil when the config has no route of its activity
	// EntityWorkflowID is, for a signal route's delivery key, the entity
	// workflow the record's event is signalled into (when the record was
	// read and decided): Temporal is its execution, and the ledger's run
	// the entity run that took the signal. No ledger/Temporal disagreement
	// is judged for a delivery but a stale pending row: an entity's
	// latest run moves on (continue-as-new, later events) by design.
	EntityWorkflowID string `json:"entity_workflow_id,omitempty"`
	// Ledger is its row; nil when there is none (or PostgreSQL did not
	// answer).
	Ledger *LedgerRow `json:"ledger,omitempty"`
	// SamePayload says whether the record's payload hash is the row's
	// (nil when either is unknown).
	SamePayload *bool        `json:"same_payload,omitempty"`
	Conflicts   []Conflict   `json:"conflicts,omitempty"`
	DeadLetters []DeadLetter `json:"dead_letters,omitempty"`
	Temporal    *Execution   `json:"temporal,omitempty"`
	// Verdict is what the record is to this workflow: claimed (it claimed
	// the row: verdict new), duplicate, conflict, not_read_yet, forgotten
	// (a route the record matches, behind the committed offset, no row),
	// not_matched (the record, read, does not match the workflow's route:
	// its row is another record's), unknown.
	Verdict       string         `json:"verdict"`
	Why           string         `json:"why"`
	Disagreements []Disagreement `json:"disagreements,omitempty"`
}

// locate is d, with where it is in its dead-letter topic.
func (t *Tool) locate(ctx context.Context, d ledger.DeadLetterEntry, problems *errs) DeadLetter {
	v := deadLetterView(d)
	dlq, err := t.findDeadLetter(ctx, d.DeadLetterTopic, d.Topic, d.Partition, d.Offset, d.WorkflowID, d.WrittenAt)
	problems.add("kafka (dead-letter topic)", err)
	v.DLQ = dlq
	return v
}

func fillRecord(r *Record, kr *kgo.Record) {
	ts := kr.Timestamp
	r.Timestamp = &ts
	r.ValueBytes = len(kr.Value)
	r.Key = printable(kr.Key)
	for _, h := range kr.Headers {
		v := h.Value
		if len(v) > 200 {
			v = v[:200]
		}
		r.Headers = append(r.Headers, Header{Key: h.Key, Value: printable(v)})
	}
}

func printable(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	return "base64:" + base64.StdEncoding.EncodeToString(b)
}

func decisionView(d *decide.Decision, noRoute string) *Decision {
	v := &Decision{Envelope: string(d.Event.Envelope), EventID: d.Event.ID, Rule: string(d.Event.Rule), IDFrom: d.Event.IDFrom,
		Type: d.Event.Type, Source: d.Event.Source, Time: d.Event.Time, DeadLetter: string(d.DeadLetter), NoRoute: d.NoRoute,
		Tombstone: d.Tombstone, Routes: []RouteMatch{}}
	if d.Event.ID != "" {
		v.PayloadHash = hex.EncodeToString(d.Event.PayloadHash[:])
	}
	if d.Err != nil && !d.Tombstone {
		v.Error = d.Err.Error()
	}
	if d.NoRoute {
		v.NoRoutePolicy = noRoute
	}
	for i, in := range d.Intents {
		m := RouteMatch{Route: *routeView(d.Routes[i]), WorkflowID: in.WorkflowID}
		if d.Entities != nil {
			m.EntityWorkflowID = d.Entities[i]
		}
		v.Routes = append(v.Routes, m)
	}
	return v
}
