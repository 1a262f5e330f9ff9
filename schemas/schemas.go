// Package schemas holds dedup's contracts with the outside world: the
// ledger's SQL migrations and the input every routed workflow receives.
// Workers import this package to decode their input.
package schemas

import (
	"crypto/sha256"
	"embed"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"iter"
)

// Migrations are the ledger's goose migrations, applied by `dedup migrate`
// and at start.
//
//go:embed migrations/*.sql
var Migrations embed.FS

// WorkflowInput is the single argument of every workflow dedup starts.
// Fields are only ever added, never renamed: running workflows and replays
// depend on them.
type WorkflowInput struct {
	WorkflowID string `json:"workflow_id"`
	ActivityID string `json:"activity_id"`
	EventID    string `json:"event_id"`
	// IDRule says how EventID was obtained: header, field, content or
	// coordinates.
	IDRule string          `json:"id_rule"`
	Type   string          `json:"type"`
	Source string          `json:"source,omitempty"`
	Time   string          `json:"time,omitempty"`
	Data   json.RawMessage `json:"data"`
	// DataBase64 is binary data (base64 in JSON): a CloudEvents binary-mode
	// record whose content type is not JSON (text/plain, Protobuf, Avro),
	// or whose value, with no content type, is not JSON. The bytes are the
	// record's value as it was; Data is null then. (Structured mode's
	// data_base64 still arrives in Data, as its base64 text.)
	DataBase64 []byte `json:"data_base64,omitempty"`
	// DataContentType is the data's media type as the producer declared it
	// (content-type or ce_datacontenttype; datacontenttype), if it did.
	DataContentType string `json:"datacontenttype,omitempty"`
	// Definition is the route's activity definition, when it has one: the
	// tasks RunActivityWorkflow spawns.
	Definition *ActivityDefinition `json:"definition,omitempty"`

	// TriggerKind is what started the workflow: TriggerEvent (a Kafka
	// record routed by its event ID) or TriggerCron (a scheduled slot: a
	// fire of dedup's scheduler, or a record routed with key
	// scheduled_for). Empty in inputs of dedup versions before schedules:
	// an event.
	TriggerKind string `json:"trigger_kind,omitempty"`
	// ScheduledFor is the slot's nominal time (TriggerCron), UTC, as in
	// the workflow ID: 2026-03-01T09:00:00+00:00.
	ScheduledFor string `json:"scheduled_for,omitempty"`
	// The fields below are set by dedup's scheduler only.
	//
	// Schedule is the name of the trigger that fired.
	Schedule string `json:"schedule,omitempty"`
	// Fire says how the slot fired: on_time (within the trigger's
	// misfire_threshold), catchup (a missed slot replayed late, under
	// misfire_policy catchup) or compressed (one run for every missed slot,
	// under misfire_policy compress).
	Fire string `json:"fire,omitempty"`
	// WindowStart and WindowEnd are the interval (WindowStart, WindowEnd]
	// the run covers, in the same format as ScheduledFor. WindowEnd is
	// always ScheduledFor; WindowStart is the slot before it, or, for a
	// compressed run, the newest slot decided before the ones it covers
	// (for a trigger's first run: the slot before its first slot).
	WindowStart string `json:"window_start,omitempty"`
	WindowEnd   string `json:"window_end,omitempty"`
	// MissedCount is how many slots the run stands for that misfired
	// (passed by more than misfire_threshold before the scheduler decided
	// them): 0 on time, 1 for a catch-up run (its own slot), and for a
	// compressed run every slot its window covers, its own included (the
	// slots dedup_schedule_fires_total counts compressed). Present in
	// every input of dedup's scheduler, 0 included (MarshalJSON); absent
	// from events' inputs.
	MissedCount int64 `json:"missed_count,omitempty"`
}

// MarshalJSON writes the input with missed_count present (0 included)
// when dedup's scheduler fired it (Schedule set), and without it
// otherwise, so that a scheduled run's input says "missed nothing" rather
// than leaving it out.
func (in WorkflowInput) MarshalJSON() ([]byte, error) {
	type plain WorkflowInput // without this method
	if in.Schedule == "" {
		return json.Marshal(plain(in))
	}
	return json.Marshal(struct {
		plain
		MissedCount int64 `json:"missed_count"` // shallower: replaces plain's omitempty field
	}{plain(in), in.MissedCount})
}

// SignalEvent is the input of the signal a signal route (mode: signal)
// sends to its entity workflow, with SignalWithStartWorkflowExecution: one
// signal per event. Its event fields mirror WorkflowInput's. Fields are
// only ever added, never renamed.
//
// A workflow must deduplicate the signals it receives by EventID: dedup
// delivers each event at least once, and Temporal drops a re-sent signal
// (same request ID) only within the run that recorded it, not across
// continue-as-new or a new run (docs/signals.md).
type SignalEvent struct {
	// EventID is the event's ID under the route's ID rule: the key a
	// workflow deduplicates signals by.
	EventID string `json:"event_id"`
	// DeliveryID is the ledger key of this delivery,
	// signal-{activity_id}:{event_id}: one per route and event (whatever
	// entity the event's data names), the same on every re-delivery.
	DeliveryID string `json:"delivery_id"`
	// ActivityID is the route that delivered the event.
	ActivityID string `json:"activity_id"`
	// WorkflowID is the entity workflow's ID, from the route's template.
	WorkflowID string `json:"workflow_id"`
	// IDRule says how EventID was obtained: header, field, content or
	// coordinates.
	IDRule string `json:"id_rule"`
	Type   string `json:"type"`
	Source string `json:"source,omitempty"`
	// Subject is the CloudEvents subject, when the event has one.
	Subject string          `json:"subject,omitempty"`
	Time    string          `json:"time,omitempty"`
	Data    json.RawMessage `json:"data"`
	// DataBase64 is binary data, as in WorkflowInput: Data is null then.
	DataBase64 []byte `json:"data_base64,omitempty"`
	// DataContentType is the data's media type as the producer declared
	// it, if it did.
	DataContentType string `json:"datacontenttype,omitempty"`
}

// DefaultSignalName is the signal name of a signal route that names none.
const DefaultSignalName = "event"

// Trigger kinds of WorkflowInput.TriggerKind.
const (
	TriggerEvent = "event"
	TriggerCron  = "cron"
)

// ActivityDefinition is what RunActivityWorkflow does for an activity.
type ActivityDefinition struct {
	// Tasks are spawned as child workflows task-{run_id}:{type}:{index},
	// run_id being the name-based UUID of the workflow ID (package worker).
	Tasks []TaskSpec `json:"tasks" yaml:"tasks"`
	// ActivityTimeout bounds each attempt of a task's work (start to
	// close), in seconds; a worker that dies mid-task is noticed after it.
	// 0 means 30.
	ActivityTimeoutSeconds int `json:"activity_timeout_seconds,omitempty" yaml:"activity_timeout_seconds"`
	// MaxAttempts bounds the attempts of each task's work (errors the task
	// marks permanent are never retried). 0 means 10.
	MaxAttempts int `json:"max_attempts,omitempty" yaml:"max_attempts"`
	// ScheduleToCloseSeconds bounds each task's work across all its
	// attempts, waiting for a worker included. 0 means 3600.
	ScheduleToCloseSeconds int `json:"schedule_to_close_seconds,omitempty" yaml:"schedule_to_close_seconds"`
	// DedupeKeyStrategy is how the activity handles missed runs of a
	// scheduled trigger: skip, catchup or compress. A trigger's definition
	// must say it, and it must match the trigger's misfire_policy (the
	// seed contract's rule): the schedule decides how it fires, the
	// workflow how it treats the window it gets.
	DedupeKeyStrategy string `json:"dedupe_key_strategy,omitempty" yaml:"dedupe_key_strategy"`
}

// TaskSpec is one task of an activity.
type TaskSpec struct {
	// Type selects the task type: the built-in "webhook" (POST the event,
	// with an Idempotency-Key) or "noop", or a type registered in the
	// worker (worker.NewTaskType). Letters, digits, '_', '.', '-'.
	Type string `json:"type" yaml:"type"`
	// URL overrides the worker's webhook URL for a webhook task.
	URL string `json:"url,omitempty" yaml:"url"`
}

// Headers dedup adds to a dead-lettered record, next to the original key,
// value and headers.
const (
	HeaderDLQReason    = "dedup-reason"    // a fixed word: undecodable, missing_type, invalid_id, no_id, forged_tenant, oversized, conflict, no_route, temporal_permanent
	HeaderDLQError     = "dedup-error"     // the error text
	HeaderDLQTopic     = "dedup-topic"     // where the record was read
	HeaderDLQPartition = "dedup-partition" // decimal
	HeaderDLQOffset    = "dedup-offset"    // decimal
	HeaderDLQTimestamp = "dedup-timestamp" // the original record's timestamp, RFC 3339 with milliseconds
	HeaderDLQWorkflow  = "dedup-workflow-id"
	// HeaderDLQValueDropped is set (to the value's size in bytes) when the
	// dead-letter topic refused the dead letter as too large and the value
	// was left out (the original stays in the source topic at the
	// coordinates above: dedup dlq replay reads it from there).
	HeaderDLQValueDropped = "dedup-value-dropped"
	// HeaderDLQKeyDropped (the key's size in bytes) and
	// HeaderDLQHeadersDropped (how many of the original's headers) are set
	// when the dead letter was still too large without its value: the key
	// and the original headers are left out too, but for the original's
	// dedup-origin-* headers (where a replayed record was first read). What
	// is left, the headers above with the error and workflow ID cut to fit
	// (HeaderDLQWorkflowCut), fits a topic that takes a kilobyte as long as
	// the source and origin topics' names take under 450 bytes together.
	HeaderDLQKeyDropped     = "dedup-key-dropped"
	HeaderDLQHeadersDropped = "dedup-headers-dropped"
	// HeaderDLQWorkflowCut is set (to the workflow ID's length in bytes)
	// when a summary carries only the start of the workflow ID (so that it
	// fits a topic that takes a kilobyte): the whole ID is in the
	// dead-letter log (dedup_dead_letters.workflow_id) under the
	// coordinates above.
	HeaderDLQWorkflowCut = "dedup-workflow-id-cut"
	// HeaderDLQOriginalSHA256 is set on every dead letter that lacks the
	// original's value (so with dedup-value-dropped): OriginalSHA256 of
	// the original's key, value and headers, in hex. dedup dlq replay
	// reads the original from the source topic and replays it only when
	// the record there has this digest (the same record, not another one
	// at the same coordinates of a recreated topic).
	HeaderDLQOriginalSHA256 = "dedup-original-sha256"
)

// DeadLetterHeaders are the headers the router sets on a dead letter. A
// record's own headers of these names are left out of its dead letter (a
// record cannot speak for the router): the router's are the only ones.
var DeadLetterHeaders = []string{HeaderDLQReason, HeaderDLQError, HeaderDLQTopic, HeaderDLQPartition, HeaderDLQOffset,
	HeaderDLQTimestamp, HeaderDLQWorkflow, HeaderDLQValueDropped, HeaderDLQKeyDropped, HeaderDLQHeadersDropped,
	HeaderDLQWorkflowCut, HeaderDLQOriginalSHA256}

// OriginalSHA256 is the value of HeaderDLQOriginalSHA256 for a record of
// key, value and headers (every header, in order, as the record holds
// them): SHA-256, in hex, over "dedup-original v1\n" and then the key, the
// value, the number of headers and each header's name and value, each
// field its length as 8 bytes big-endian (a null key or value: all ones)
// and its bytes.
func OriginalSHA256(key, value []byte, headers iter.Seq2[string, []byte]) string {
	h := sha256.New()
	h.Write([]byte("dedup-original v1\n"))
	field := func(b []byte, null bool) {
		n := uint64(len(b))
		if null {
			n = ^uint64(0)
		}
		var l [8]byte
		binary.BigEndian.PutUint64(l[:], n)
		h.Write(l[:])
		h.Write(b)
	}
	field(key, key == nil)
	field(value, value == nil)
	var keys [][2][]byte
	for k, v := range headers {
		keys = append(keys, [2][]byte{[]byte(k), v})
	}
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(keys)))
	h.Write(n[:])
	for _, kv := range keys {
		field(kv[0], false)
		field(kv[1], false)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Headers `dedup dlq replay` puts on a record it sends back to its topic:
// where the record was first read. The coordinates ID rule uses them, so a
// replayed record keeps its first ID. A replayed copy dead-lettered again
// keeps them (in every form of its dead letter), and the next replay sends
// them on as they are: the origin travels with every copy.
const (
	HeaderOriginTopic     = "dedup-origin-topic"
	HeaderOriginPartition = "dedup-origin-partition"
	HeaderOriginOffset    = "dedup-origin-offset"
)

// MemoGeneration is the memo field in which every run dedup starts carries
// the generation it was started for (an integer: 1 for the first run of a
// workflow ID, one more for each re-run under an allow_* policy). The
// router reads it back to choose the next generation; the worker fences
// with it a delayed start of an older generation.
const MemoGeneration = "dedup_generation"
