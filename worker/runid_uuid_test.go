package worker_test

import (
	"context"
	"io/fs"
	"slices"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/dedupio/dedup/internal/testsupport/pgtest"
	"github.com/dedupio/dedup/schemas"
	"github.com/dedupio/dedup/sink/ledger"
	"github.com/dedupio/dedup/worker"
)

// migrations is a goose provider over dedup's embedded migrations, for
// tests that stop at a version.
func migrations(t *testing.T, url string) *goose.Provider {
	t.Helper()
	pc, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	db := stdlib.OpenDB(*pc)
	t.Cleanup(func() { _ = db.Close() })
	sub, err := fs.Sub(schemas.Migrations, "migrations")
	if err != nil {
		t.Fatal(err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, sub)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Migration 00008 makes run_id a uuid in activity_runs and in the tables
// that carry it (activity_run_attempts, task_instances). Existing rows
// keep their run: a UUID stays that UUID (in its canonical form); a value
// that is not a UUID (no run of dedup's writes one: a row written by hand
// or by another tool) becomes the name-based UUID (v3) of the old text in
// the run namespace, in all three tables alike, and the old text is kept
// in activity_runs.original_run_id. Nothing is dropped and the migration
// never fails on such a row. Down restores text and the old values.
func TestRunIDBecomesUUID(t *testing.T) {
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	p := migrations(t, url)
	if _, err := p.UpTo(ctx, 7); err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := pool.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	current := worker.RunID("activity-signup:evt-1")   // a run of today's code: v5
	temporal := "7a1f0c2e-9b4d-4e5f-8a6b-1c2d3e4f5a6b" // a legacy run: a Temporal run ID (canonical, as Temporal writes them)
	upper := "7A1F0C2E-9B4D-4E5F-8A6B-1C2D3E4F5A6C"    // another spelling of a UUID: a name like any other text
	foreign := "legacy-run-7"                          // not a UUID
	for _, id := range []string{current, temporal, upper, foreign} {
		exec(`INSERT INTO activity_runs (run_id, workflow_id, activity_id, event_id) VALUES ($1, 'wf-' || $1, 'a', 'e')`, id)
		exec(`INSERT INTO activity_run_attempts (run_id, temporal_run_id, attempt) VALUES ($1, 'r1', 1)`, id)
		exec(`INSERT INTO task_instances (id, run_id, task_type, task_index) VALUES ('task-' || $1 || ':noop:0', $1, 'noop', 0)`, id)
	}
	if err := ledger.Migrate(ctx, url); err != nil {
		t.Fatalf("migrating to the newest: %v", err)
	}

	for _, table := range []string{"activity_runs", "activity_run_attempts", "task_instances"} {
		var typ string
		if err := pool.QueryRow(ctx, `SELECT data_type FROM information_schema.columns WHERE table_name = $1 AND column_name = 'run_id'`, table).Scan(&typ); err != nil {
			t.Fatal(err)
		}
		if typ != "uuid" {
			t.Errorf("%s.run_id is %s, want uuid", table, typ)
		}
	}
	ns := uuid.NewSHA1(uuid.NameSpaceURL, []byte("https://github.com/dedupio/dedup/worker/activity_runs"))
	mapped := uuid.NewMD5(ns, []byte(foreign)).String()
	want := map[string]string{ // run_id -> original_run_id
		current:                                 "",
		temporal:                                "",
		uuid.NewMD5(ns, []byte(upper)).String(): upper,
		mapped:                                  foreign,
	}
	rows, err := pool.Query(ctx, `SELECT r.run_id::text, coalesce(r.original_run_id, ''),
	(SELECT count(*) FROM activity_run_attempts a WHERE a.run_id = r.run_id),
	(SELECT count(*) FROM task_instances ti WHERE ti.run_id = r.run_id)
FROM activity_runs r`)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for rows.Next() {
		var id, orig string
		var attempts, tasks int
		if err := rows.Scan(&id, &orig, &attempts, &tasks); err != nil {
			t.Fatal(err)
		}
		got[id] = orig
		if attempts != 1 || tasks != 1 {
			t.Errorf("run %s: %d attempts, %d tasks after the migration, want 1 and 1 (the tables must agree)", id, attempts, tasks)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("runs %v, want %v", got, want)
	}
	for id, orig := range want {
		if o, ok := got[id]; !ok || o != orig {
			t.Errorf("run %s: original_run_id %q (present %v), want %q", id, o, ok, orig)
		}
	}
	if u, _ := uuid.Parse(mapped); u.Version() != 3 {
		t.Errorf("mapped %s: version %d, want 3", mapped, u.Version())
	}
	// A value that is not a UUID is refused from now on, by the type.
	if _, err := pool.Exec(ctx, `INSERT INTO activity_runs (run_id, workflow_id, activity_id, event_id) VALUES ('not-a-uuid', 'w', 'a', 'e')`); err == nil {
		t.Error("activity_runs took a run_id that is not a UUID")
	}

	if _, err := p.DownTo(ctx, 7); err != nil {
		t.Fatalf("down to 7: %v", err)
	}
	var back []string
	rows, err = pool.Query(ctx, `SELECT r.run_id FROM activity_runs r
	JOIN activity_run_attempts a USING (run_id) JOIN task_instances ti USING (run_id) ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		back = append(back, id)
	}
	if len(back) != 4 || !slices.Contains(back, foreign) || !slices.Contains(back, upper) {
		t.Fatalf("after down: %v, want the four runs, %s and %s among them, joined as before", back, foreign, upper)
	}
}
