package processor

import (
	"context"
	"errors"

	"github.com/dedupio/dedup/processor/decide"
)

// Starter starts workflows. Start must be safe to call again for the same
// workflow ID: the router re-drives pending claims and retries transient
// errors, relying on the ID reuse policy to keep one execution per ID.
type Starter interface {
	Start(ctx context.Context, req decide.StartRequest) (StartResult, error)
	// LastRun describes the workflow ID's current (latest) run in
	// namespace (empty: the starter's default, as for StartRequest).
	LastRun(ctx context.Context, namespace, workflowID string) (decide.Run, error)
}

// StartResult is a start that Temporal accepted, or refused because the
// workflow ID was already started: both count as success. For a signal
// delivery, RunID is the run that has the signal, and AlreadyStarted says
// it was a run already open (SignalWithStart signalled it, or found this
// delivery's request ID already recorded in it) rather than one the
// delivery started.
type StartResult struct {
	RunID          string
	AlreadyStarted bool
}

type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

// Permanent marks err as not worth retrying (bad request, unknown
// namespace): the record is dead-lettered. Unmarked errors are retried with
// backoff for as long as the router runs.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return permanentError{err}
}

// IsPermanent reports whether err was marked with Permanent.
func IsPermanent(err error) bool {
	var p permanentError
	return errors.As(err, &p)
}
