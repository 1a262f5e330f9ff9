package worker_test

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/dedupio/dedup/worker"
)

// rows is a table's rows as JSON, in a stable order, without the columns
// named in except: what a retry must leave as the first attempt left it.
func (l *lab) rows(table string, except []string) []string {
	l.t.Helper()
	rows, err := l.pool.Query(context.Background(), `SELECT (to_jsonb(t) - coalesce($1::text[], '{}'))::text FROM `+table+` t ORDER BY 1`, except)
	if err != nil {
		l.t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			l.t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		l.t.Fatal(err)
	}
	return out
}

// thrice runs the activity three times with the same input, as Temporal
// does when an attempt's answer is lost (the activity environment's
// Temporal run ID is the same each time: retries of one execution). Each
// attempt must give the first one's result, and leave the tables as the
// first one did: one row each, unchanged (but for the columns in except).
func thrice[T any](l *lab, name string, activity any, in any, except []string, tables ...string) T {
	l.t.Helper()
	var first T
	var after map[string][]string
	for i := 1; i <= 3; i++ {
		if i > 1 {
			time.Sleep(10 * time.Millisecond) // a retry comes later: now() moves
		}
		v, err := l.env.ExecuteActivity(activity, in)
		if err != nil {
			l.t.Fatalf("%s attempt %d: %v", name, i, err)
		}
		var got T
		if v != nil && v.HasValue() {
			if err := v.Get(&got); err != nil {
				l.t.Fatal(err)
			}
		}
		now := map[string][]string{}
		for _, table := range tables {
			now[table] = l.rows(table, except)
			if len(now[table]) != 1 {
				l.t.Fatalf("%s attempt %d: %d rows in %s, want 1: %v", name, i, len(now[table]), table, now[table])
			}
		}
		if i == 1 {
			first, after = got, now
			continue
		}
		if !reflect.DeepEqual(got, first) {
			l.t.Errorf("%s attempt %d: %+v, want the first attempt's %+v", name, i, got, first)
		}
		for _, table := range tables {
			if !reflect.DeepEqual(now[table], after[table]) {
				l.t.Errorf("%s attempt %d changed %s:\n got  %v\n want %v", name, i, table, now[table], after[table])
			}
		}
	}
	return first
}

// The workflow's own record-keeping activities are retried until
// PostgreSQL answers (bookkeeping options): each, run three times, gives
// one row and the same result.
func TestBookkeepingActivitiesRetried(t *testing.T) {
	l := newLab(t)
	in := taskInput("noop", `{}`)
	run := worker.RunInput{RunID: in.RunID, WorkflowID: in.Event.WorkflowID, ActivityID: "signup", EventID: "evt-1", TaskIDs: []string{in.ID}}

	st := thrice[worker.RunStart](l, "StartRun", l.acts.StartRun, run, nil, "activity_runs", "activity_run_attempts")
	if st.Attempt != 1 || len(st.Completed) != 0 || st.SupersededBy != 0 {
		t.Fatalf("StartRun: %+v, want attempt 1, nothing completed", st)
	}
	ts := thrice[worker.TaskStart](l, "StartTask", l.acts.StartTask, in, nil, "task_instances")
	if ts.Completed {
		t.Fatalf("StartTask: %+v, want a task to run", ts)
	}
	thrice[struct{}](l, "EndTask", l.acts.EndTask, worker.TaskEnd{ID: in.ID, Status: "completed", Output: json.RawMessage(`{"ok":true}`)}, nil, "task_instances")
	// The task completed: a retry of StartTask (a later execution's)
	// returns its result and leaves it completed.
	ts = thrice[worker.TaskStart](l, "StartTask after EndTask", l.acts.StartTask, in, nil, "task_instances")
	var res struct{ OK bool }
	if !ts.Completed || json.Unmarshal(ts.Result, &res) != nil || !res.OK {
		t.Fatalf("StartTask of a completed task: %+v (%s)", ts, ts.Result)
	}
	// finishedAtMoves: see TestEndTaskFailedRetried.
	thrice[struct{}](l, "EndRun", l.acts.EndRun, worker.RunEnd{RunInput: run, Status: "completed"}, finishedAtMoves, "activity_runs", "activity_run_attempts")
	var status string
	if err := l.pool.QueryRow(context.Background(), `SELECT r.status || '/' || a.status FROM activity_runs r JOIN activity_run_attempts a USING (run_id)`).Scan(&status); err != nil || status != "completed/completed" {
		t.Fatalf("run/attempt %q, %v; want completed/completed", status, err)
	}
}

// finishedAtMoves are the columns a retry may rewrite: none. (A retried
// EndRun, or EndTask with a failure, set finished_at = now() again until
// EndRun took the attempt's finished_at and EndTask coalesce(finished_at,
// now()); these tests failed on it.)
var finishedAtMoves []string

// A task that failed: EndTask's retries record the failure once.
func TestEndTaskFailedRetried(t *testing.T) {
	l := newLab(t)
	in := taskInput("noop", `{}`)
	if _, err := l.env.ExecuteActivity(l.acts.StartTask, in); err != nil {
		t.Fatal(err)
	}
	thrice[struct{}](l, "EndTask failed", l.acts.EndTask, worker.TaskEnd{ID: in.ID, Status: "failed", Error: "boom"}, finishedAtMoves, "task_instances")
}
