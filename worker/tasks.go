package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"regexp"

	"github.com/dedupio/dedup/schemas"
	"github.com/dedupio/dedup/worker/idempotency"
)

// TaskType is a kind of task that RunActivityWorkflow can run: a name (the
// type a route's definition lists) and a function. Make one with
// NewTaskType and hand it to Activities.Tasks.
type TaskType struct {
	name string
	run  func(ctx context.Context, data json.RawMessage) (json.RawMessage, error)
}

// Name is the task type's name.
func (t TaskType) Name() string { return t.name }

var taskName = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)

// NewTaskType makes a task type from a typed function, in the manner of a
// DBOS workflow step or Restate's ctx.run:
//
//	welcome := worker.NewTaskType("welcome_email", func(ctx context.Context, in Signup) (Sent, error) {
//		return worker.Step(ctx, "send", in, func(ctx context.Context, key string) (Sent, error) {
//			return mailer.Send(ctx, key, in) // the key goes to the outside service
//		})
//	})
//
// fn's input is the event's data (schemas.WorkflowInput.Data) decoded into
// In (json.RawMessage takes it as is; data that does not decode fails the
// task for good); the rest of the event and the task's identity are in
// TaskInfoFrom(ctx). fn's output is stored as the task's result
// (task_instances.result): a task that completed is never run again, a
// re-run adopts that result.
//
// fn runs in a Temporal activity and may run again (a retry after an error
// or a crash, a re-run of a failed run), from the start: whatever it does
// outside must be in a Step, or idempotent by itself (an IF NOT EXISTS, a
// guarded update; see worker/tenants). Return Permanent(err) for an
// error that trying again cannot fix: the task fails at once, without the
// remaining attempts. Other errors are retried, up to the definition's
// max_attempts within its schedule_to_close_seconds.
func NewTaskType[In, Out any](name string, fn func(ctx context.Context, in In) (Out, error)) TaskType {
	return TaskType{name: name, run: func(ctx context.Context, data json.RawMessage) (json.RawMessage, error) {
		var in In
		if raw, ok := any(&in).(*json.RawMessage); ok {
			*raw = data
		} else if len(data) > 0 && string(data) != "null" {
			if err := json.Unmarshal(data, &in); err != nil {
				return nil, Permanent(fmt.Errorf("decoding the event's data as %s: %w", reflect.TypeFor[In](), err))
			}
		}
		out, err := fn(ctx, in)
		if err != nil {
			return nil, err
		}
		b, err := json.Marshal(out)
		if err != nil {
			return nil, Permanent(fmt.Errorf("encoding the task's result: %w", err))
		}
		if string(b) == "null" {
			return nil, nil // no result (task_instances.result NULL)
		}
		return b, nil
	}}
}

// TaskInfo is what a running task knows about itself.
type TaskInfo struct {
	ID         string // task-{run_id}:{type}:{index}
	RunID      string // RunID(WorkflowID)
	WorkflowID string // the run's workflow ID
	Type       string
	Index      int
	URL        string // the task spec's url, if any
	Event      schemas.WorkflowInput
	Attempt    int32 // the activity's attempt, from 1
	// Generation is the run's generation (1 for the first run of the
	// workflow ID, one more per re-run; 0 when its start carried none).
	// Steps run in it: a step that failed in an older generation runs
	// again, one that failed in this one keeps its outcome.
	Generation int
}

type taskKey struct{}

type running struct {
	info TaskInfo
	keys *idempotency.Store
}

func withTask(ctx context.Context, r *running) context.Context {
	return context.WithValue(ctx, taskKey{}, r)
}

// TaskInfoFrom returns the running task's info; ok is false outside a task.
func TaskInfoFrom(ctx context.Context) (info TaskInfo, ok bool) {
	r, ok := ctx.Value(taskKey{}).(*running)
	if !ok {
		return TaskInfo{}, false
	}
	return r.info, true
}

// ErrNoTask is returned when Step is called outside a running task.
var ErrNoTask = errors.New("worker.Step: not inside a running task")

// Step runs fn at most once to an outcome per task and step name, under
// the idempotency key {task_id}:{step} (StepKey) in the key store. fn gets
// the step's external key, which it should pass on to the outside service
// (an Idempotency-Key header, a Message-ID) so that it can drop a repeat
// the store could not see (a crash mid-call): StepKey, and
// {task_id}:{step}:{n} once re-runs took over failures that service
// answered n times (see below).
//
//   - A step that completed returns its stored result (decoded into Out)
//     without running fn: on a retry of the task, on a re-run of the
//     workflow ID, after a reset.
//   - A step that failed runs again on the next attempt; one that failed
//     with Permanent(err) returns that error again without running fn,
//     for the rest of the run's generation (TaskInfo.Generation: its
//     retries, a reset). A failure belongs to the generation that failed:
//     a re-run (a newer generation) runs the step again, once more, under
//     the same store key.
//   - The external key changes only when a re-run takes over a failure
//     the service answered (fn returned an error not marked Unanswered,
//     before its context ended): services that honour idempotency keys
//     (Stripe) bind a key to its first answer, a 500 too, and refuse it
//     with another body (422), so the re-run calls under
//     {task_id}:{step}:{n}, one more n per such takeover. A call of
//     unknown outcome keeps the key: a crash or a lease that ran out
//     mid-call (in any generation), an Unanswered error (no answer, a
//     timeout), a call cut short by the attempt's deadline; the service
//     may have made the effect, and the same key lets it drop the repeat.
//     The retries within a generation keep it too (a service that saved a
//     5xx answers it again until the attempts run out; the re-run gets a
//     new key).
//   - params identify the step's effect (what it does and to whom; never
//     delivery metadata such as the event's time): their fingerprint is
//     stored with the key. Within a generation the same step with other
//     params is a permanent error (never a stale result). A newer
//     generation may bring other params (the operator fixed the
//     definition): a step that failed runs again with them, one that
//     completed returns its stored result (the effect happened once).
//   - While fn runs, the key's lease is renewed; a second attempt of the
//     same task that finds it running gets a retryable error, and the
//     attempt after that reads the outcome.
//
// Step names must be unique within a task, and may not end in a colon and
// digits (":2"), the form of an external key's epoch: the external keys of
// two steps never meet.
func Step[Out any](ctx context.Context, name string, params any, fn func(ctx context.Context, key string) (Out, error)) (Out, error) {
	var zero Out
	r, ok := ctx.Value(taskKey{}).(*running)
	if !ok {
		return zero, ErrNoTask
	}
	if name == "" {
		return zero, Permanent(errors.New("worker.Step: empty step name"))
	}
	if epochLike.MatchString(name) {
		return zero, Permanent(fmt.Errorf("worker.Step: step name %q ends in a colon and digits, the form of an external key's epoch", name))
	}
	key := StepKey(r.info.ID, name)
	fp, err := idempotency.Fingerprint(params)
	if err != nil {
		return zero, Permanent(err)
	}
	raw, err := r.keys.DoKeyed(ctx, key, r.info.Generation, fp, func(ctx context.Context, external string) ([]byte, error) {
		out, err := fn(ctx, external)
		if err != nil {
			return nil, err
		}
		b, err := json.Marshal(out)
		if err != nil {
			return nil, Permanent(fmt.Errorf("encoding step %s's result: %w", name, err))
		}
		return b, nil
	})
	if err != nil {
		return zero, err
	}
	var out Out
	if err := json.Unmarshal(raw, &out); err != nil {
		return zero, Permanent(fmt.Errorf("decoding step %s's stored result: %w", name, err))
	}
	return out, nil
}

// epochLike is a step name that would read as another step's external key
// (idempotency.ExternalKey: key:epoch).
var epochLike = regexp.MustCompile(`:[0-9]+$`)

// Permanent marks err as permanent: trying again cannot fix it (a rejected
// request, an unknown address). A step stores it and returns it to every
// later attempt; the task fails at once (a non-retryable Temporal error)
// and its run records it. nil stays nil.
func Permanent(err error) error { return idempotency.Permanent(err) }

// IsPermanent says whether err is, or wraps, a permanent error.
func IsPermanent(err error) bool { return idempotency.IsPermanent(err) }

// Unanswered marks err as a failure of unknown outcome: the outside service
// gave no answer (no response, a timeout, a connection cut after the
// request went out), so it may have made the effect. The step is retried
// like any failure, but a re-run keeps its external key (see Step), for
// the service to drop the repeat. Errors returned after the step's context
// ended count as unanswered without it. nil stays nil.
func Unanswered(err error) error { return idempotency.Unanswered(err) }

// IsUnanswered says whether err is, or wraps, an unanswered failure.
func IsUnanswered(err error) bool { return idempotency.IsUnanswered(err) }
