package client

import (
	"errors"
	"fmt"
	"strings"

	"github.com/dedupio/dedup/processor/eventid"
)

// ErrNoKey is returned when the event has no idempotency key and the
// routers' event_id chain derives none (or only one known once written:
// coordinates). Nothing was written.
var ErrNoKey = errors.New("no idempotency key, and nothing to derive one from")

// ErrConflict matches every *ConflictError (errors.Is).
var ErrConflict = errors.New("idempotency key reused with another payload")

// ConflictError says the ledger holds the event's ID with another payload:
// a producer reused the key. The event never starts those workflows; the
// first payload's keep their runs. Whether this call wrote a record is the
// handle's Produced (see Client.Send).
type ConflictError struct {
	EventID     string
	WorkflowIDs []string
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("event %s: %v: the ledger holds %s with the first payload", e.EventID, ErrConflict, strings.Join(e.WorkflowIDs, ", "))
}

// Is makes errors.Is(err, ErrConflict) hold.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// InvalidEventError is an event a router would dead-letter or skip, refused
// before it is written. Reason is the router's word for it (eventid's
// reasons, oversized, no_route). Sending it again unchanged fails again.
type InvalidEventError struct {
	Reason string
	Err    error
}

func (e *InvalidEventError) Error() string { return e.Reason + ": " + e.Err.Error() }
func (e *InvalidEventError) Unwrap() error { return e.Err }

// KeyMismatchError is an event whose idempotency key the routers'
// event_id config would not take as its ID (Enqueue): a router would give
// it EventID, by Rule. Nothing was written. A chain with the header rule
// first and ce_id in event_id.headers makes the key the ID.
type KeyMismatchError struct {
	Key     string
	EventID string
	Rule    eventid.Rule
}

func (e *KeyMismatchError) Error() string {
	return fmt.Sprintf("the routers' event_id config gives this event the ID %q (rule %s), not its key %q: "+
		"a chain with the header rule first and ce_id in event_id.headers makes the key the ID", e.EventID, e.Rule, e.Key)
}

// ProduceError says Kafka did not acknowledge the event's record (the
// context ended first, or the producer gave up): it may or may not have
// been written. A retry with the same key is safe: the routers start one
// workflow either way.
type ProduceError struct {
	EventID string
	Topic   string
	Err     error
}

func (e *ProduceError) Error() string {
	return fmt.Sprintf("producing event %s to %s (it may or may not be written; retrying with the same key is safe): %v", e.EventID, e.Topic, e.Err)
}
func (e *ProduceError) Unwrap() error { return e.Err }

// ConfigError is a Config that New refuses; Field names the field.
type ConfigError struct {
	Field string
	Err   error
}

func (e *ConfigError) Error() string { return "client: Config." + e.Field + ": " + e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

// WorkflowError is a workflow run that closed without a result: Status is
// failed, timed_out, terminated or canceled; Message is the failure's.
type WorkflowError struct {
	WorkflowID, RunID string
	Status            string
	Message           string
}

func (e *WorkflowError) Error() string {
	msg := fmt.Sprintf("workflow %s run %s %s", e.WorkflowID, e.RunID, e.Status)
	if e.Message != "" {
		msg += ": " + e.Message
	}
	return msg
}

// ErrNotStarted is returned when the ledger says Temporal refused the
// workflow's start for good (dead_lettered): it has no run to wait for.
var ErrNotStarted = errors.New("workflow not started: Temporal refused its start and the record was dead-lettered")

// ErrUnknownWorkflow is returned when no route makes workflow IDs of this
// form.
var ErrUnknownWorkflow = errors.New("no route makes this workflow ID")

// ErrSeveralWorkflows is Handle.Result's error for an event that several
// routes give a workflow each: it has no one result; ask Client.Result
// for each workflow ID.
var ErrSeveralWorkflows = errors.New("the event starts several workflows")

// ErrNoRuns is returned by Result, which needs Temporal's runs, when the
// Client has no Config.Runs (and, with ErrNoLedger, by Status when it has
// neither reader).
var ErrNoRuns = errors.New("client: no run reader (Config.Runs)")

// ErrNoLedger is returned, with ErrNoRuns, by Status when the Client has
// neither Config.Ledger nor Config.Runs: it would know nothing.
var ErrNoLedger = errors.New("client: no ledger reader (Config.Ledger)")
