package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.temporal.io/sdk/testsuite"

	"github.com/dedupio/dedup/internal/testsupport/pgtest"
	"github.com/dedupio/dedup/sink/ledger"
	"github.com/dedupio/dedup/worker"
	"github.com/dedupio/dedup/worker/idempotency"
)

// `dedup worker` under its least-privilege role (sink/ledger roles.sql,
// grants.sql): every activity and the key store's maintenance work, the
// generation fence reads the three ledger columns it needs (workflow_id, key, generation), and the rest of
// the ledger, its writes and DDL are refused (SQLSTATE 42501).
func TestWorkerRoleRunsTheWorker(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin := pgtest.NewDatabase(t)
	if err := ledger.ApplyRoles(ctx, admin); err != nil {
		t.Fatal(err)
	}
	if err := ledger.Migrate(ctx, pgtest.NewLogin(t, admin, "dedup_owner", "dedup_owner")); err != nil {
		t.Fatal(err)
	}
	url := pgtest.NewLogin(t, admin, "", "dedup_worker")
	if err := ledger.Migrate(ctx, url); err != nil {
		t.Fatalf("the worker's migration check on a current schema: %v", err)
	}

	var sends int
	greet := worker.NewTaskType("greet", func(ctx context.Context, in signup) (greeted, error) {
		return worker.Step(ctx, "send", in, func(ctx context.Context, key string) (greeted, error) {
			sends++
			return greeted{MessageID: "<" + key + ">", To: in.Email}, nil
		})
	})
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	keys, err := idempotency.New(pool, idempotency.DefaultOptions(), nil, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	acts := &worker.Activities{Pool: pool, Keys: keys, Tasks: []worker.TaskType{greet}}
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	env.RegisterActivity(acts)

	in := taskInput("greet", `{"user":"u1","email":"u1@example.com"}`)
	// The router claimed the workflow ID for generation 2: StartRun's
	// fence reads it.
	a, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = a.Close(ctx) }()
	if _, err := a.Exec(ctx, `INSERT INTO dedup_ledger (workflow_id, activity_id, event_id, id_rule, payload_hash, topic, kafka_partition, kafka_offset, generation)
VALUES ($1, 'signup', 'evt-1', 'field', '\x00', 'events', 0, 0, 2)`, in.Event.WorkflowID); err != nil {
		t.Fatal(err)
	}
	run := worker.RunInput{RunID: in.RunID, WorkflowID: in.Event.WorkflowID, ActivityID: "signup", EventID: "evt-1", TaskIDs: []string{in.ID}, Generation: 2}
	v, err := env.ExecuteActivity(acts.StartRun, run)
	if err != nil {
		t.Fatalf("StartRun as the worker: %v", err)
	}
	var st worker.RunStart
	if err := v.Get(&st); err != nil || st.Attempt != 1 || st.SupersededBy != 0 {
		t.Fatalf("StartRun: %+v, %v; want attempt 1, not superseded", st, err)
	}
	if _, err := env.ExecuteActivity(acts.StartTask, in); err != nil {
		t.Fatalf("StartTask as the worker: %v", err)
	}
	v, err = env.ExecuteActivity(acts.RunTask, in)
	if err != nil {
		t.Fatalf("RunTask as the worker: %v", err)
	}
	var out json.RawMessage
	if err := v.Get(&out); err != nil || sends != 1 {
		t.Fatalf("RunTask: %s, %v, %d sends", out, err, sends)
	}
	if _, err := env.ExecuteActivity(acts.EndTask, worker.TaskEnd{ID: in.ID, Status: "completed", Output: out}); err != nil {
		t.Fatalf("EndTask as the worker: %v", err)
	}
	if _, err := env.ExecuteActivity(acts.EndRun, worker.RunEnd{RunInput: run, Status: "completed"}); err != nil {
		t.Fatalf("EndRun as the worker: %v", err)
	}
	// The legacy path (runs started before run IDs were name-based): the
	// run ID is the Temporal run ID, a UUID (activity_runs.run_id is one).
	const legacyRun = "0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9"
	legacy := worker.TaskInput{ID: "task-" + legacyRun + ":greet:0", RunID: legacyRun, Type: "greet", Event: in.Event}
	if _, err := env.ExecuteActivity(acts.LogRun, worker.LogRunInput{RunID: legacyRun, WorkflowID: "w", ActivityID: "signup", EventID: "evt-0"}); err != nil {
		t.Fatalf("LogRun as the worker: %v", err)
	}
	if _, err := env.ExecuteActivity(acts.LogTask, legacy); err != nil {
		t.Fatalf("LogTask as the worker: %v", err)
	}
	if _, err := env.ExecuteActivity(acts.FinishTask, legacy.ID, json.RawMessage(`{}`)); err != nil {
		t.Fatalf("FinishTask as the worker: %v", err)
	}
	if _, err := env.ExecuteActivity(acts.FinishRun, legacyRun, "completed"); err != nil {
		t.Fatalf("FinishRun as the worker: %v", err)
	}
	// The key store's maintenance: the reaper and the gauge.
	if _, err := a.Exec(ctx, `UPDATE idempotency_keys SET expires_at = now() - interval '1 hour'`); err != nil {
		t.Fatal(err)
	}
	if n, err := keys.Reap(ctx, 100); err != nil || n != 1 {
		t.Fatalf("Reap as the worker: %d, %v; want 1 key", n, err)
	}
	if err := keys.RefreshStats(ctx); err != nil {
		t.Fatalf("RefreshStats as the worker: %v", err)
	}

	for _, s := range []string{
		`SELECT payload_hash FROM dedup_ledger`,
		`SELECT * FROM dedup_ledger`,
		`UPDATE dedup_ledger SET generation = 3`,
		`DELETE FROM dedup_ledger`,
		`SELECT count(*) FROM dedup_conflicts`,
		`SELECT count(*) FROM dedup_dead_letters`,
		`SELECT count(*) FROM dedup_schedule_cursors`,
		`DELETE FROM activity_runs`,
		`DELETE FROM task_instances`,
		`INSERT INTO goose_db_version (version_id, is_applied) VALUES (999, true)`,
		`CREATE TABLE worker_intruder (id int)`,
		`ALTER TABLE activity_runs ADD COLUMN intruder int`,
		`TRUNCATE idempotency_keys`,
		`DROP TABLE task_instances`,
	} {
		_, err := pool.Exec(ctx, s)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "42501" {
			t.Errorf("%s as the worker: %v, want permission denied (SQLSTATE 42501)", s, err)
		}
	}
}
