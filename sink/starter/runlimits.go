package starter

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.temporal.io/api/serviceerror"
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

// RunLimitError is a delivery the entity's run refused by its signal
// limit, after the starter held it for RunLimitWait: transient (the
// router retries it, and the run is expected to continue as new).
type RunLimitError struct {
	Entity string
	Waited time.Duration
	Err    error
}

func (e *RunLimitError) Error() string {
	return fmt.Sprintf("delivering to workflow %s: its run is at %s (waited %s for it to continue as new): %v",
		e.Entity, signalLimit, e.Waited.Round(time.Millisecond), e.Err)
}

func (e *RunLimitError) Unwrap() error { return e.Err }

// runGate holds the deliveries to an entity whose run refused a signal by
// its signal limit: backpressure on that entity only. While an entity is
// gated, its deliveries wait here instead of each calling Temporal; one
// at a time (the probe) asks again, after a backoff that doubles from 1 s
// to 30 s; when a probe gets through, the gate opens for all. A delivery
// waits at most wait in all, then returns a RunLimitError (transient) to
// the router, which retries it: so a run that never continues as new (a
// stopped worker) shows as start errors and retries, and alerts
// (DedupSignalsRefusedByRunLimit), instead of being dead-lettered.
type runGate struct {
	wait time.Duration
	mu   sync.Mutex
	m    map[string]*gated
}

type gated struct {
	next    time.Time     // the next probe, not before
	backoff time.Duration // the wait after the next refusal
	probing bool
	changed chan struct{} // closed when a probe ends
}

const (
	gateFirstBackoff = time.Second
	gateMaxBackoff   = 30 * time.Second
)

// enter waits until the delivery to entity may call Temporal: at once
// when the entity is not gated; else as the probe, or when a probe got
// through. It returns the error to answer instead (ctx ended, or the
// delivery waited g.wait), and whether the call is the probe.
func (g *runGate) enter(ctx context.Context, entity string) (probe bool, err error) {
	start := time.Now()
	for {
		g.mu.Lock()
		e := g.m[entity]
		now := time.Now()
		if e == nil {
			g.mu.Unlock()
			return false, nil
		}
		if !e.probing && !now.Before(e.next) {
			e.probing = true
			g.mu.Unlock()
			return true, nil
		}
		ch, wait := e.changed, e.next.Sub(now)
		g.mu.Unlock()
		left := g.wait - time.Since(start)
		if left <= 0 {
			return false, &RunLimitError{Entity: entity, Waited: time.Since(start),
				Err: errors.New("exceeded workflow execution limit for signal events")}
		}
		if e.probing || wait <= 0 {
			wait = left
		}
		t := time.NewTimer(min(wait, left))
		select {
		case <-ctx.Done():
			t.Stop()
			return false, ctx.Err()
		case <-ch:
		case <-t.C:
		}
		t.Stop()
	}
}

// leave records what a call to entity answered: a refusal by the signal
// limit gates the entity (or, for the probe, backs the next probe off);
// a delivery that got through opens the gate; a probe that failed
// otherwise (a timeout) lets the next waiter probe at once.
func (g *runGate) leave(entity string, probe bool, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	e := g.m[entity]
	switch {
	case RunLimit(err) == signalLimit && e == nil:
		g.m[entity] = &gated{next: time.Now().Add(gateFirstBackoff), backoff: 2 * gateFirstBackoff, changed: make(chan struct{})}
	case RunLimit(err) == signalLimit && probe:
		e.next, e.backoff, e.probing = time.Now().Add(e.backoff), min(2*e.backoff, gateMaxBackoff), false
		close(e.changed)
		e.changed = make(chan struct{})
	case RunLimit(err) == signalLimit, e == nil:
	case err == nil:
		delete(g.m, entity)
		close(e.changed)
	case probe:
		e.probing = false
		close(e.changed)
		e.changed = make(chan struct{})
	}
}
