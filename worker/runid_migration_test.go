package worker_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dedupio/dedup/internal/testsupport/pgtest"
	"github.com/dedupio/dedup/sink/ledger"
)

// Guards against: migration 00008 promises that a run_id it cannot keep as it
// is "is not dropped, and does not stop the migration (which would keep
// every router and worker from starting over a history row)". Its UUID
// test is a regular expression that accepts every spelling PostgreSQL's
// uuid input takes (upper case, no hyphens, braces), and each spelling is
// cast to the one canonical uuid. Two rows whose run_id are two spellings
// of one UUID (a Temporal run ID written once as Temporal prints it and
// once upper-cased or braced by another tool, which is exactly the kind of
// row the migration says it tolerates) were two distinct primary keys as
// text and become one as uuid: the ALTER TABLE fails with a unique
// violation, the migration rolls back, and `dedup run` / `dedup worker`
// (both migrate at start) never start. Nothing in the migration maps such
// a collision (keeping one, or moving the other to original_run_id).
//
// Why it matters: the migration's stated contract is that no history row
// can block it; a single hand-written row does.
func TestRunIDMigrationSurvivesTwoSpellingsOfOneUUID(t *testing.T) {
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
	// One Temporal run ID as Temporal prints it, the same UUID as another
	// tool wrote it (upper case), and in braces: three distinct texts.
	spellings := []string{
		"7a1f0c2e-9b4d-4e5f-8a6b-1c2d3e4f5a6b",
		"7A1F0C2E-9B4D-4E5F-8A6B-1C2D3E4F5A6B",
		"{7a1f0c2e-9b4d-4e5f-8a6b-1c2d3e4f5a6b}",
	}
	for i, id := range spellings {
		if _, err := pool.Exec(ctx, `INSERT INTO activity_runs (run_id, workflow_id, activity_id, event_id) VALUES ($1, $2, 'a', 'e')`,
			id, "wf-"+string(rune('a'+i))); err != nil {
			t.Fatalf("inserting run %q before 00008: %v", id, err)
		}
		if _, err := pool.Exec(ctx, `INSERT INTO activity_run_attempts (run_id, temporal_run_id, attempt) VALUES ($1, 'r1', 1)`, id); err != nil {
			t.Fatalf("inserting attempt of %q: %v", id, err)
		}
	}
	if err := ledger.Migrate(ctx, url); err != nil {
		t.Fatalf("migrating past 00008 with %d spellings of one UUID in activity_runs: %v\n"+
			"(the migration says a run_id it cannot keep as it is does not stop it; this one does, and every dedup process migrates at start)",
			len(spellings), err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM activity_runs`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != len(spellings) {
		t.Fatalf("%d runs after the migration, want %d (nothing is dropped)", n, len(spellings))
	}
}
