package idempotency

import (
	"errors"
	"fmt"
	"time"
)

// InProgressError is returned when another caller holds a live lease on
// the key.
type InProgressError struct {
	Key        string
	LeaseUntil time.Time
	// Remaining is how long the lease still runs (by the database's
	// clock): the earliest a retry can take over, if its holder stops
	// renewing it.
	Remaining time.Duration
}

func (e *InProgressError) Error() string {
	return fmt.Sprintf("idempotency key %s is in progress elsewhere until %s", e.Key, e.LeaseUntil.Format(time.RFC3339))
}

// MismatchError is returned when the key was used with other request
// parameters.
type MismatchError struct{ Key string }

func (e *MismatchError) Error() string {
	return fmt.Sprintf("idempotency key %s was used with different parameters", e.Key)
}

// SupersededError is returned to a caller of an older generation than the
// key's (a stale execution of a run that a newer generation re-ran): it
// does not run fn. A key with a stored success returns that instead.
type SupersededError struct {
	Key string
	// Generation is the caller's, KeyGeneration the key's.
	Generation, KeyGeneration int
}

func (e *SupersededError) Error() string {
	return fmt.Sprintf("idempotency key %s is held by generation %d: generation %d is superseded and does not run it",
		e.Key, e.KeyGeneration, e.Generation)
}

// LeaseLostError is returned when this holder's lease was taken over while
// fn ran, so fn may have run twice (here and in the holder that took
// over). Stored says whether this holder's success was kept anyway (the
// key had none); Err is fn's own error, if it failed. The key's stored
// outcome, not this holder's, is the answer: call Do again to read it.
type LeaseLostError struct {
	Key    string
	Stored bool
	Err    error
}

func (e *LeaseLostError) Error() string {
	s := fmt.Sprintf("idempotency key %s: the lease was lost while the call ran (it may have run twice)", e.Key)
	switch {
	case e.Err != nil:
		s += ": " + e.Err.Error()
	case e.Stored:
		s += "; its result was stored, the key had none"
	}
	return s
}

// PermanentError marks an error that will not go away by trying again (a
// rejected request, an invalid address): Do stores it as failed_permanent
// and returns it to every later call of the key without running fn.
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string { return e.Err.Error() }
func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent wraps err as a *PermanentError (nil stays nil).
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	var pe *PermanentError
	if errors.As(err, &pe) {
		return err
	}
	return &PermanentError{Err: err}
}

// IsPermanent says whether err is, or wraps, a *PermanentError.
func IsPermanent(err error) bool {
	var pe *PermanentError
	return errors.As(err, &pe)
}

// UnansweredError marks a failure of unknown outcome: the outside service
// gave no answer (no response, a timeout, a connection cut after the
// request went out), so the call may have been made. Do stores it as failed
// like any error, but a newer generation that takes the key over keeps its
// external key (see the package doc): the service can drop the repeat. An
// error returned after fn's context ended counts as unanswered too.
type UnansweredError struct{ Err error }

func (e *UnansweredError) Error() string { return e.Err.Error() }
func (e *UnansweredError) Unwrap() error { return e.Err }

// Unanswered wraps err as an *UnansweredError (nil stays nil).
func Unanswered(err error) error {
	if err == nil || IsUnanswered(err) {
		return err
	}
	return &UnansweredError{Err: err}
}

// IsUnanswered says whether err is, or wraps, an *UnansweredError.
func IsUnanswered(err error) bool {
	var ue *UnansweredError
	return errors.As(err, &ue)
}
