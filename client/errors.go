package client

import (
	"errors"
	"fmt"
	"strings"
)

// ErrNoKey is returned when the event has no idempotency key and the
// routers' event_id chain derives none (or only one known once written:
// coordinates).
var ErrNoKey = errors.New("no idempotency key, and nothing to derive one from")

// ErrConflict matches every *ConflictError (errors.Is).
var ErrConflict = errors.New("idempotency key reused with another payload")

// ConflictError says the ledger holds the event's ID with another payload:
// a producer reused the key. The event never starts those workflows.
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
// reasons, oversized, no_route).
type InvalidEventError struct {
	Reason string
	Err    error
}

func (e *InvalidEventError) Error() string { return e.Reason + ": " + e.Err.Error() }
func (e *InvalidEventError) Unwrap() error { return e.Err }

// WorkflowError is a workflow run that closed without a result: failed,
// timed out, terminated or cancelled.
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
