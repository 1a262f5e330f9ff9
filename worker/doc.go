// Package worker is the Temporal side of dedup: RunActivityWorkflow, the
// workflow every route starts, its task instances, a task API for users,
// and the built-in tasks. `dedup worker` runs it; users can register it,
// with task types of their own, in their own workers.
//
// dedup guarantees one workflow start per event. This package keeps the
// guarantee inside the workflow — each side effect once per workflow ID —
// across activity retries, worker crashes, replays, resets and the re-runs
// that a reuse policy allows:
//
//   - A run's identity is its workflow ID: run_id = RunID(workflow ID), a
//     name-based UUID, the primary key of activity_runs; each Temporal
//     execution is an attempt (activity_run_attempts). Task IDs
//     task-{run_id}:{type}:{index} and step keys {task_id}:{step} derive
//     from it.
//   - A task that completed (in any execution) is adopted: its stored
//     result, never run again. A task that failed runs again in the next
//     execution. A task an earlier execution left running is awaited, not
//     started twice.
//   - A task's outside work runs in steps (Step) under its key in the
//     idempotency store: a completed step returns its stored result; the
//     key goes to the outside service, which can drop the one repeat the
//     store cannot see (a crash between the effect and its record).
//   - Failures end: retries are bounded (max_attempts, schedule-to-close),
//     Permanent errors are not retried, and runs and tasks record failed
//     or cancelled with the error. A failed task does not stop its
//     siblings.
//
// docs/worker.md has the table of what runs again in each case.
package worker
