package processor

import (
	"context"
	"errors"
	"time"
)

// Parked is a transient refusal that concerns one key only, not the
// dependency: sink/starter's answer for a delivery to an entity whose run
// is at Temporal's signal limit (RunLimitError). The start pool parks the
// job without a start worker until Wake says the key may be asked again,
// then queues it again: backpressure on that entity only, while the
// workers go on with every other workflow, and the dependency is not
// counted as failing (it answered). Never dead-lettered: it heals.
type Parked interface {
	error
	// Wake is when to ask again: when changed closes (another call for
	// the key ended) or at at, whichever comes first.
	Wake() (changed <-chan struct{}, at time.Time)
	// Stuck reports that the key has refused for longer than its bound
	// (temporal.run_limit_wait): the pool reports the job once (a warning
	// and a transient start error) and keeps it parked.
	Stuck() bool
}

// parkedErr is err's Parked, if it is one.
func parkedErr(err error) (Parked, bool) {
	var p Parked
	if err == nil || !errors.As(err, &p) {
		return nil, false
	}
	return p, true
}

// park holds j, out of the start queue and without a worker, until p's
// Wake, then queues it again; or abandons it (done, not ok: a waiter takes
// over) when its partition or the pool's work ends first.
func (s *startPool) park(ctx context.Context, j *job, p Parked) {
	if p.Stuck() && !j.stuck {
		j.stuck = true
		s.m.startErrors.WithLabelValues("transient").Inc()
		event := j.req.Input.EventID
		if j.req.Signal != nil {
			event = j.req.Signal.Input.EventID
		}
		s.log.Warn("delivery still waiting for its entity's run to continue as new", "workflow_id", j.req.WorkflowID,
			"event_id", event, "err", p.Error())
	}
	changed, at := p.Wake()
	s.parked.Add(1)
	go func() {
		defer s.parked.Done()
		t := time.NewTimer(time.Until(at))
		defer t.Stop()
		select {
		case <-changed:
		case <-t.C:
		case <-ctx.Done():
			s.done(j, false)
			return
		case <-s.workCtx.Done():
			s.done(j, false)
			return
		}
		s.enqueue(ctx, j)
	}()
}

func isParked(err error) bool {
	_, ok := parkedErr(err)
	return ok
}
