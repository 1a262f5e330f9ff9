package starter

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"go.temporal.io/api/serviceerror"

	"github.com/dedupio/dedup/processor"
)

// Temporal's per-run limits (v1.32.1), as its history service refuses a
// signal or a start. Each is InvalidArgument, the code of a bad request,
// but none is a verdict on the event: the run the request goes into is
// full, and the next run takes it. So they are transient (Permanent):
//
//   - history.maximumSignalsPerExecution (10,000 signals a run by
//     default, unread ones included): checked before the request ID, so a
//     re-sent delivery is refused alike. It heals when the run continues
//     as new (the Receiver of worker/signals does, at MaxSeen handled
//     events) or closes; until then every delivery to that entity is
//     refused, and the starter holds them (runGate).
//   - limit.historySize.error, limit.historyCount.error and
//     limit.mutableStateSize.error: the server force-terminates the run
//     that went over and answers the request that tipped it with this
//     error; the request was not applied. Retried, it starts the next run
//     (allow_duplicate, allow_duplicate_failed_only: a terminated run
//     counts as failed) or meets the closed run (reject_duplicate:
//     "already started", permanent as any delivery the policy refuses).
//
// Permanent, by contrast (the request itself is too large, every run
// refuses it): limit.blobSize.error ("Blob data size exceeds limit.", the
// signal's or the start's payload), limit.memoSize.error, and the
// frontend's length limits of IDs and names.
//
// Not met by dedup: the limits of pending activities, child workflows and
// signals to other workflows (limit.numPending*) refuse the commands of a
// workflow task, never a start or a signal from outside.
var runLimitMessages = map[string]string{
	"exceeded workflow execution limit for signal events": "history.maximumSignalsPerExecution",
	"Workflow history size exceeds limit.":                "limit.historySize.error",
	"Workflow history count exceeds limit.":               "limit.historyCount.error",
	"Workflow mutable state size exceeds limit.":          "limit.mutableStateSize.error",
}

// RunLimit names the per-run limit of Temporal that err reports
// (history.maximumSignalsPerExecution, limit.historyCount.error, ...), or
// "" if err is not one of those refusals.
func RunLimit(err error) string {
	if err == nil {
		return ""
	}
	var inv *serviceerror.InvalidArgument
	if !errors.As(err, &inv) {
		return ""
	}
	return runLimitMessages[inv.Message]
}

const signalLimit = "history.maximumSignalsPerExecution"

// RunLimitError is a delivery to an entity whose run is at its signal
// limit: refused by Temporal, or held by the starter while the entity's
// run is known to be full. Transient, and a processor.Parked: the router
// parks the delivery, without a start worker, until Wake, and asks again;
// the entity's other deliveries park with it, every other workflow goes
// on. Never dead-lettered: the run heals when it continues as new.
type RunLimitError struct {
	Entity string
	// Waited is how long the entity's run has refused (since its first
	// refusal that the gate still holds).
	Waited time.Duration
	Err    error

	changed <-chan struct{}
	at      time.Time
	bound   time.Duration
}

func (e *RunLimitError) Error() string {
	return fmt.Sprintf("delivering to workflow %s: its run is at %s (refusing for %s, waiting for it to continue as new): %v",
		e.Entity, signalLimit, e.Waited.Round(time.Millisecond), e.Err)
}

func (e *RunLimitError) Unwrap() error { return e.Err }

var _ processor.Parked = (*RunLimitError)(nil)

// Wake is when to ask again: a call to the entity ended (changed) or the
// next probe's time (at).
func (e *RunLimitError) Wake() (changed <-chan struct{}, at time.Time) { return e.changed, e.at }

// Stuck reports that the entity's run has refused for longer than
// temporal.run_limit_wait (a stopped worker, a receiver that does not
// continue as new): the router reports it, and the delivery waits on.
func (e *RunLimitError) Stuck() bool { return e.Waited >= e.bound }

// runGate holds the deliveries to an entity whose run refused a signal by
// its signal limit: backpressure on that entity only. While an entity is
// gated, its deliveries do not call Temporal: enter answers them with a
// RunLimitError at once (the router parks them without a worker); one at
// a time (the probe) asks again, after a backoff that doubles from 1 s to
// 30 s; when a probe gets through, the gate opens for all. A run that
// never continues as new shows as refused probes (the SDK's failures that
// DedupSignalsRefusedByRunLimit reads) and, past wait, as stuck deliveries
// (a warning and a transient start error each), never as dead letters.
type runGate struct {
	wait time.Duration
	mu   sync.Mutex
	m    map[string]*gated
}

type gated struct {
	since   time.Time     // the first refusal
	next    time.Time     // the next probe, not before
	backoff time.Duration // the wait after the next refusal
	probing bool
	changed chan struct{} // closed when a probe ends
}

const (
	gateFirstBackoff = time.Second
	gateMaxBackoff   = 30 * time.Second
)

// enter says whether the delivery to entity may call Temporal: at once
// when the entity is not gated, or as its probe; else the RunLimitError
// to answer instead (without waiting: the caller parks it).
func (g *runGate) enter(entity string) (probe bool, wait *RunLimitError) {
	g.mu.Lock()
	defer g.mu.Unlock()
	e := g.m[entity]
	now := time.Now()
	if e == nil {
		return false, nil
	}
	if !e.probing && !now.Before(e.next) {
		e.probing = true
		return true, nil
	}
	return false, g.errLocked(entity, e, errors.New("exceeded workflow execution limit for signal events"))
}

// errLocked is the RunLimitError of a delivery to the gated entity e.
func (g *runGate) errLocked(entity string, e *gated, err error) *RunLimitError {
	at := e.next
	if e.probing {
		at = time.Now().Add(gateMaxBackoff) // a probe is in flight: its end wakes us
	}
	return &RunLimitError{Entity: entity, Waited: time.Since(e.since), Err: err, changed: e.changed, at: at, bound: g.wait}
}

// leave records what a call to entity answered: a refusal by the signal
// limit gates the entity (or, for the probe, backs the next probe off) and
// is answered as a RunLimitError; a delivery that got through opens the
// gate; a probe that failed otherwise (a timeout) lets the next waiter
// probe at once.
func (g *runGate) leave(entity string, probe bool, err error) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	e := g.m[entity]
	refused := RunLimit(err) == signalLimit
	switch {
	case refused && e == nil:
		now := time.Now()
		e = &gated{since: now, next: now.Add(gateFirstBackoff), backoff: 2 * gateFirstBackoff, changed: make(chan struct{})}
		g.m[entity] = e
	case refused && probe:
		e.next, e.backoff, e.probing = time.Now().Add(e.backoff), min(2*e.backoff, gateMaxBackoff), false
		close(e.changed)
		e.changed = make(chan struct{})
	case refused, e == nil:
	case err == nil:
		delete(g.m, entity)
		close(e.changed)
	case probe:
		e.probing = false
		close(e.changed)
		e.changed = make(chan struct{})
	}
	if refused {
		return g.errLocked(entity, e, err)
	}
	return err
}
