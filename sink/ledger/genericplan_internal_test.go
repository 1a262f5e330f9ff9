package ledger

import (
	"context"
	"database/sql"
	"strings"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/dedupio/dedup/internal/testsupport/pgtest"
)

// A server before PostgreSQL 12 has no plan_cache_mode, so every batch of
// a replay's read by runs would fail there, and retry forever: the
// ledger refuses such a server when it migrates (every process's start),
// naming its version and the one it needs, and takes 12 and later.
func TestALedgerOnAServerBeforePostgreSQL12IsRefusedAtItsStartNamingTheVersion(t *testing.T) {
	for _, c := range []struct {
		num     int
		version string
		ok      bool
	}{
		{110022, "11.22", false},
		{100023, "10.23", false},
		{120000, "12.0", true},
		{150018, "15.18 (Debian 15.18-0+deb12u1)", true},
		{180001, "18.1", true},
	} {
		err := serverSupported(c.num, c.version)
		if c.ok {
			if err != nil {
				t.Errorf("PostgreSQL %s: %v, want it taken", c.version, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), "PostgreSQL "+c.version) || !strings.Contains(err.Error(), "12 or later") {
			t.Errorf("PostgreSQL %s: %v, want a refusal naming the version and 12 or later", c.version, err)
		}
	}
	// The server here, read as migrate reads it, is taken.
	db, err := sql.Open("pgx", pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = db.Close() }()
	if err := checkServer(context.Background(), db); err != nil {
		t.Errorf("this server: %v", err)
	}
}
