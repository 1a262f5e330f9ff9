package pooler_test

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/dedupio/dedup/sink/ledger/pooler"
)

func TestValidateNamesTheField(t *testing.T) {
	for _, m := range []pooler.Mode{"", pooler.None, pooler.Session, pooler.Transaction} {
		if err := m.Validate("postgres.pooler"); err != nil {
			t.Errorf("%q: %v", m, err)
		}
	}
	if err := pooler.Mode("statement").Validate("postgres.pooler"); err == nil || !strings.HasPrefix(err.Error(), "postgres.pooler: ") {
		t.Errorf("statement: %v, want an error naming postgres.pooler", err)
	}
}

// Behind a pooler a session parameter PgBouncer would refuse at login is
// refused at start, naming the URL; the ones it keeps pass. Transaction
// pooling turns pgx to unnamed statements; none and session keep pgx's
// named ones.
func TestConfigure(t *testing.T) {
	parse := func(url string) *pgx.ConnConfig {
		c, err := pgx.ParseConfig(url)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	const base = "postgres://u@127.0.0.1:6432/db?sslmode=disable"
	for _, m := range []pooler.Mode{pooler.Session, pooler.Transaction} {
		err := m.Configure(parse(base+"&lock_timeout=1s"), "postgres.url")
		if err == nil || !strings.Contains(err.Error(), "postgres.url sets the session parameter lock_timeout") {
			t.Errorf("%s with lock_timeout: %v, want a refusal naming postgres.url and the parameter", m, err)
		}
		if err := m.Configure(parse(base+"&application_name=router"), "postgres.url"); err != nil {
			t.Errorf("%s with application_name: %v", m, err)
		}
	}
	if err := pooler.None.Configure(parse(base+"&lock_timeout=1s"), "postgres.url"); err != nil {
		t.Errorf("none with lock_timeout: %v", err)
	}
	for m, want := range map[pooler.Mode]pgx.QueryExecMode{pooler.None: pgx.QueryExecModeCacheStatement,
		pooler.Session: pgx.QueryExecModeCacheStatement, pooler.Transaction: pgx.QueryExecModeCacheDescribe} {
		c := parse(base)
		if err := m.Configure(c, "postgres.url"); err != nil {
			t.Fatal(err)
		}
		if c.DefaultQueryExecMode != want {
			t.Errorf("%s: exec mode %s, want %s", m, c.DefaultQueryExecMode, want)
		}
	}
}
