package ledger_test

import (
	"context"
	"crypto/sha256"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dedupio/dedup/internal/testsupport/pgtest"
	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/sink/ledger"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func open(t testing.TB) *ledger.Postgres {
	t.Helper()
	url := pgtest.NewDatabase(t)
	ctx := context.Background()
	if err := ledger.Migrate(ctx, url); err != nil {
		t.Fatal(err)
	}
	// Migrations are idempotent: a second run (every start runs them) is a no-op.
	if err := ledger.Migrate(ctx, url); err != nil {
		t.Fatal(err)
	}
	cfg := ledger.DefaultConfig()
	cfg.URL = url
	l, err := ledger.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	return l
}

// sqlLog records the statements a pool sends.
type sqlLog struct {
	mu   sync.Mutex
	sql  []string
	args [][]any // each statement's arguments
}

func (s *sqlLog) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	s.mu.Lock()
	args := make([]any, len(d.Args))
	for i, a := range d.Args {
		args[i] = ledger.PlainArg(a)
	}
	s.sql = append(s.sql, d.SQL)
	s.args = append(s.args, args)
	s.mu.Unlock()
	return ctx
}

func (s *sqlLog) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (s *sqlLog) sent(part string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, q := range s.sql {
		if strings.Contains(q, part) {
			return true
		}
	}
	return false
}

// openTraced is open with a pool that records its statements in the
// returned log.
func openTraced(t *testing.T) (*ledger.Postgres, *sqlLog) {
	t.Helper()
	pc, err := pgxpool.ParseConfig(open(t).Pool().Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	log := &sqlLog{}
	pc.ConnConfig.Tracer = log
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return ledger.NewFromPool(pool), log
}

func (s *sqlLog) reset() {
	s.mu.Lock()
	s.sql, s.args = nil, nil
	s.mu.Unlock()
}

func intent(id, payload string) decide.Intent {
	return decide.Intent{
		WorkflowID: "activity-a:" + id, ActivityID: "a", EventID: id, IDRule: "field",
		PayloadHash: sha256.Sum256([]byte(payload)), Topic: "events", Partition: 1, Offset: 7,
	}
}

func claim(t *testing.T, l *ledger.Postgres, in ...decide.Intent) []decide.Verdict {
	t.Helper()
	cl, err := l.Claim(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	if len(cl) != len(in) {
		t.Fatalf("%d verdicts for %d intents", len(cl), len(in))
	}
	v := make([]decide.Verdict, len(cl))
	for i, c := range cl {
		v[i] = c.Verdict
	}
	return v
}

func want(t *testing.T, got []decide.Verdict, want ...decide.Verdict) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("verdicts %v, want %v", got, want)
	}
}
