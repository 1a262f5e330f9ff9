package ledgerread_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/dedupio/dedup/client"
	"github.com/dedupio/dedup/internal/testsupport/pgbouncer"
	"github.com/dedupio/dedup/internal/testsupport/pgtest"
	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/sink/ledger"
	"github.com/dedupio/dedup/sink/ledger/ledgerread"
	"github.com/dedupio/dedup/sink/ledger/pooler"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var _ client.LedgerReader = (*ledgerread.Reader)(nil)

// migrated is a migrated ledger (the routers' side, which writes) and a
// Reader of it.
func migrated(t *testing.T) (*ledger.Postgres, *ledgerread.Reader) {
	t.Helper()
	url := pgtest.NewDatabase(t)
	ctx := context.Background()
	if err := ledger.Migrate(ctx, url); err != nil {
		t.Fatal(err)
	}
	lc := ledger.DefaultConfig()
	lc.URL = url
	led, err := ledger.Open(ctx, lc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(led.Close)
	r, err := ledgerread.Open(ctx, url, ledgerread.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return led, r
}

func intent(id, payload string, offset int64) decide.Intent {
	return decide.Intent{WorkflowID: "activity-a:" + id, ActivityID: "a", EventID: id, IDRule: "header",
		PayloadHash: sha256.Sum256([]byte(payload)), Topic: "events", Partition: 0, Offset: offset}
}

// The Reader answers what the routers' ledger holds, with the payload
// hashes of the conflicts they recorded (distinct, in byte order: two
// copies of one other payload are one hash), as sink/ledger's Lookup does
// (the same query).
func TestLookupGivesRecordedConflictHashes(t *testing.T) {
	led, r := migrated(t)
	ctx := context.Background()
	first := intent("k", "p1", 1)
	if _, err := led.Claim(ctx, []decide.Intent{first, intent("quiet", "q", 2)}); err != nil {
		t.Fatal(err)
	}
	for i, p := range []string{"p2", "p3", "p2"} {
		if v, err := led.Claim(ctx, []decide.Intent{intent("k", p, int64(10+i))}); err != nil || v[0].Verdict != decide.VerdictConflict {
			t.Fatalf("conflicting claim %s: %v %v", p, v, err)
		}
	}
	want := [][32]byte{sha256.Sum256([]byte("p2")), sha256.Sum256([]byte("p3"))}
	slices.SortFunc(want, func(a, b [32]byte) int { return strings.Compare(string(a[:]), string(b[:])) })
	ids := []string{first.WorkflowID, "activity-a:quiet", "activity-a:unknown"}
	got, err := r.Lookup(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	e := got[first.WorkflowID]
	if len(got) != 2 || e.PayloadHash != first.PayloadHash || e.State != decide.LedgerPending || e.Conflicts != 3 || !slices.Equal(e.ConflictHashes, want) {
		t.Fatalf("entry %+v (of %d), want 3 conflicts with the hashes of p2 and p3", e, len(got))
	}
	if q := got["activity-a:quiet"]; q.Conflicts != 0 || q.ConflictHashes != nil {
		t.Errorf("entry without conflicts: %+v", q)
	}
	viaLedger, err := led.Lookup(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	if v := viaLedger[first.WorkflowID]; v.Conflicts != 3 || !slices.Equal(v.ConflictHashes, want) {
		t.Errorf("sink/ledger's Lookup: %+v, want the Reader's answer", v)
	}
}

// The Reader's sessions are read-only: a write through its pool is refused
// by PostgreSQL (25006), whatever the user's grants.
func TestReaderCannotWrite(t *testing.T) {
	_, r := migrated(t)
	_, err := r.Pool().Exec(context.Background(), `DELETE FROM dedup_ledger`)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "25006" {
		t.Fatalf("a write through the Reader: %v, want SQLSTATE 25006 read_only_sql_transaction", err)
	}
}

// A URL that would send the password to another machine without verifying
// it is refused, naming the way out, without repeating the password.
func TestOpenRefusesUnverifiedRemote(t *testing.T) {
	ctx := context.Background()
	for _, url := range []string{"postgres://u:pw@db.example.com/d?sslmode=disable", "postgres://u:pw@db.example.com/d?sslmode=require"} {
		_, err := ledgerread.Open(ctx, url, ledgerread.Options{})
		if err == nil || !strings.Contains(err.Error(), "AllowInsecure") || strings.Contains(err.Error(), "pw") {
			t.Errorf("%s: %v, want a refusal naming AllowInsecure", url, err)
		}
		r, err := ledgerread.Open(ctx, url, ledgerread.Options{AllowInsecure: true})
		if err != nil {
			t.Errorf("%s with AllowInsecure: %v", url, err)
			continue
		}
		r.Close()
	}
	r, err := ledgerread.Open(ctx, "postgres://u:pw@127.0.0.1/d?sslmode=disable", ledgerread.Options{})
	if err != nil {
		t.Fatalf("loopback: %v", err)
	}
	r.Close()
}

// Behind PgBouncer, which refuses default_transaction_read_only at login,
// the Reader's lookups answer (each a READ ONLY transaction), and under
// transaction pooling they leave nothing read-only on the server session
// the routers' ledger shares with them (one server session: the claim
// after the lookup runs on the same one).
func TestLookupThroughPooler(t *testing.T) {
	for _, mode := range []pgbouncer.Mode{pgbouncer.Transaction, pgbouncer.Session} {
		t.Run(string(mode), func(t *testing.T) {
			url := pgtest.NewDatabase(t)
			ctx := context.Background()
			if err := ledger.Migrate(ctx, url); err != nil {
				t.Fatal(err)
			}
			b := pgbouncer.Start(t, url, pgbouncer.Options{Mode: mode, PoolSize: 1})
			lc := ledger.DefaultConfig()
			lc.URL, lc.Pooler, lc.MaxConns = b.URL(url), pooler.Mode(mode), 2
			led, err := ledger.Open(ctx, lc)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(led.Close)
			r, err := ledgerread.Open(ctx, b.URL(url), ledgerread.Options{Pooler: pooler.Mode(mode), MaxConns: 1})
			if err != nil {
				t.Fatal(err)
			}
			// Under session pooling with one server session the Reader's
			// session holds it: the ledger goes first and lets it go.
			if _, err := led.Claim(ctx, []decide.Intent{intent("a", "p", 1)}); err != nil {
				t.Fatal(err)
			}
			if mode == pgbouncer.Session {
				led.Close()
			}
			for range 3 {
				got, err := r.Lookup(ctx, []string{"activity-a:a", "activity-a:b"})
				if err != nil {
					t.Fatalf("lookup through the pooler: %v", err)
				}
				if len(got) != 1 || got["activity-a:a"].State != decide.LedgerState("pending") {
					t.Fatalf("lookup: %+v, want activity-a:a pending only", got)
				}
			}
			r.Close()
			if mode == pgbouncer.Session {
				return
			}
			if _, err := led.Claim(ctx, []decide.Intent{intent("b", "p", 2)}); err != nil {
				t.Fatalf("claim on the server session after the lookups: %v", err)
			}
		})
	}
}
