// Package worker is the Temporal side of dedup: RunActivityWorkflow, the
// workflow every route starts, its task instances, and their activities.
// `dedup worker` runs it; users can register it in their own workers.
//
// dedup guarantees one workflow start per event. This package keeps the
// guarantee inside the workflow, where Temporal retries activities and
// replays workflows after worker restarts:
//
//   - RunActivityWorkflow logs its run in activity_runs (primary key
//     run_id, the Temporal run ID) with an upsert that does nothing on
//     conflict: retries of log_run never add a row.
//   - Each task is a child workflow with the ID task-{run_id}:{type}:{index}.
//     A replay never starts a child twice (Temporal matches the start
//     command to its history), and a start that finds the ID taken adopts
//     that child's result instead of starting another. Each task instance
//     is recorded in task_instances by upsert on its ID.
//   - Activities with outside effects (send_webhook) run under an
//     idempotency key ({workflow_id}:{activity_type}:{activity_id}, stable
//     across retries) in the idempotency_keys store: a retry after the
//     effect returns the stored result without calling out again, and the
//     key is sent along (Idempotency-Key) for the outside service to drop a
//     repeat that the store could not see (a crash mid-call).
package worker
