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
//
// # Why a top-level folder, and where each rule lives
//
// The package runs on the other side of Temporal: it is not part of the
// event path (processor → sink) but the workflow that path starts, shipped
// as `dedup worker` and as a package users register in their own workers.
//
//   - workflow.go: RunActivityWorkflow and the task-instance child
//     workflows (task-{run_id}:{type}:{index}), adoption of completed tasks
//     and the activities' options. Deterministic code only: no PostgreSQL,
//     HTTP or wall clock (workflow_imports_test.go checks it).
//   - identity.go: run_id, the name-based UUID of the workflow ID.
//   - activities.go: the activities (PostgreSQL, the Temporal client of
//     AwaitTask), each one's idempotency guarantee, and which task errors
//     are retried (taskError).
//   - register.go: what a worker registers and which task type names it
//     accepts.
//   - tasks.go: the task API (NewTaskType, Step, Permanent).
//   - legacy.go: the code path of runs started before run identity by
//     workflow ID.
//   - worker/idempotency: the key store (leases, fencing, expiry, reaper).
//   - worker/tenants: five activities an audit found missing idempotency
//     guarantees, as task types, each made safe to retry.
//   - worker/signals: the workflow side of signal routes: each event ID
//     admitted once per chain of runs, carried across continue-as-new
//     (bounded), in batches (example: worker/signals/example).
//
// Tables: schemas/migrations/00003_worker.sql and 00005_worker_runs.sql.
package worker
