package ledger_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dedupio/dedup/processor"
	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/sink/ledger"
)

// planNotices collects the plans auto_explain sends a pool's sessions as
// notices.
type planNotices struct {
	mu    sync.Mutex
	plans []string
}

func (n *planNotices) add(_ *pgconn.PgConn, m *pgconn.Notice) {
	if strings.Contains(m.Message, "Query Text:") {
		n.mu.Lock()
		n.plans = append(n.plans, m.Message)
		n.mu.Unlock()
	}
}

// of returns the plans of the statement sql.
func (n *planNotices) of(sql string) []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []string
	for _, p := range n.plans {
		if strings.Contains(p, strings.TrimSpace(sql)) {
			out = append(out, p)
		}
	}
	return out
}

// poolOn is a pool on the database url, configured by configure, closed
// when the test ends.
func poolOn(t *testing.T, url string, configure func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	configure(pc)
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// explainedPool is a pool on the database url whose sessions send each
// statement's plan back as a notice (auto_explain), run the SET
// statements settings after its own, and are configured further by
// configure (if not nil), and the plans they sent; it skips the test
// where auto_explain cannot be loaded (LOAD needs a superuser).
func explainedPool(t *testing.T, url, settings string, configure func(*pgxpool.Config)) (*pgxpool.Pool, *planNotices) {
	t.Helper()
	notices := &planNotices{}
	pool := poolOn(t, url, func(pc *pgxpool.Config) {
		pc.ConnConfig.OnNotice = notices.add
		pc.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
			_, err := c.Exec(ctx, `LOAD 'auto_explain'`)
			if err == nil {
				_, err = c.Exec(ctx, `SET auto_explain.log_min_duration = 0; SET auto_explain.log_level = notice; SET client_min_messages = notice; `+settings)
			}
			return err
		}
		if configure != nil {
			configure(pc)
		}
	})
	if err := pool.Ping(context.Background()); err != nil {
		t.Skipf("auto_explain cannot be loaded here (LOAD needs a superuser): %v", err)
	}
	return pool, notices
}

// aReplay is n intents of one partition at offsets 0 to n-1, named
// prefix-0 on, and their marks: the first is claimed, marked started and
// claimed again, so that the ledger reads started rows first from then
// on (a replay), and a claim of the batch reads them by runs.
func aReplay(t *testing.T, l *ledger.Postgres, prefix string, n int) ([]decide.Intent, []processor.Started) {
	t.Helper()
	var batch []decide.Intent
	var started []processor.Started
	for off := range int64(n) {
		in := intent(fmt.Sprintf("%s-%d", prefix, off), "p")
		in.Offset = off
		batch = append(batch, in)
		started = append(started, processor.Started{WorkflowID: in.WorkflowID, RunID: "r", Generation: 1})
	}
	want(t, claim(t, l, batch[0]), decide.VerdictNew)
	if err := l.MarkStarted(context.Background(), started[:1]); err != nil {
		t.Fatal(err)
	}
	want(t, claim(t, l, batch[0]), decide.VerdictDuplicate)
	return batch, started
}

// openJITEager is a ledger whose sessions JIT-compile every statement
// (jit_above_cost 0) and send each statement's plan back as a notice
// (auto_explain), in exec mode mode; it skips the test on a server
// without JIT.
func openJITEager(t *testing.T, mode pgx.QueryExecMode) (*ledger.Postgres, *pgxpool.Pool, *planNotices) {
	t.Helper()
	ctx := context.Background()
	pool, notices := explainedPool(t, open(t).Pool().Config().ConnString(),
		`SET jit = on; SET jit_above_cost = 0; SET jit_inline_above_cost = -1; SET jit_optimize_above_cost = -1`,
		func(pc *pgxpool.Config) { pc.ConnConfig.DefaultQueryExecMode = mode })
	var available bool
	if err := pool.QueryRow(ctx, `SELECT pg_jit_available()`).Scan(&available); err != nil {
		t.Fatal(err)
	}
	if !available {
		t.Skip("this PostgreSQL server has no JIT (pg_jit_available() is false)")
	}
	// The control: a statement of the pool's own is compiled, and its
	// plan says so.
	if _, err := pool.Exec(ctx, `SELECT count(*) FROM dedup_ledger`); err != nil {
		t.Fatal(err)
	}
	ctl := notices.of(`SELECT count(*) FROM dedup_ledger`)
	if len(ctl) == 0 || !strings.Contains(ctl[0], "JIT:") {
		t.Fatalf("the control statement's plan shows no JIT: %q", ctl)
	}
	return ledger.NewFromPool(pool), pool, notices
}

// PostgreSQL's JIT compiles a statement whose estimated cost passes
// jit_above_cost (100,000 by default), and the estimate of the replay's
// read by runs grows with the ledger, not with what it reads (20,947 rows
// a run at 50M rows, 83 read): at 50M rows every batch of a replay was
// compiled, 300 to 550 ms each (docs/bench/ledger.md). The ledger's batch
// statements run with the JIT off (nojit.go), whatever the server's
// settings, in every exec mode a pooler setting gives: a server here that
// compiles every statement compiles none of the claim's, the mark's or
// the two reads of a replay, and a statement of the pool's own still is.
func TestTheLedgersBatchStatementsAreNeverJITCompiled(t *testing.T) {
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe, pgx.QueryExecModeDescribeExec} {
		t.Run(mode.String(), func(t *testing.T) {
			l, pool, notices := openJITEager(t, mode)
			ctx := context.Background()
			batch, started := aReplay(t, l, "jit", 40)
			for range 7 { // past the five custom plans of a prepared statement
				claim(t, l, batch...) // the first claims, the rest read by runs
				if err := l.MarkStarted(ctx, started); err != nil {
					t.Fatal(err)
				}
				// Records 10 offsets apart: read one by one (startedSQL).
				want(t, claim(t, l, batch[0], batch[10], batch[20], batch[30]), decide.VerdictDuplicate, decide.VerdictDuplicate,
					decide.VerdictDuplicate, decide.VerdictDuplicate)
			}
			for name, sql := range map[string]string{"claim": ledger.ClaimSQL, "mark": ledger.MarkStartedSQL,
				"read of started rows": ledger.StartedSQL, "read by runs": ledger.StartedByRangeSQL} {
				plans := notices.of(sql)
				if len(plans) == 0 {
					t.Errorf("the %s ran with no plan sent back", name)
				}
				for _, p := range plans {
					if strings.Contains(p, "JIT:") {
						t.Errorf("the %s was JIT-compiled:\n%s", name, p)
						break
					}
				}
			}
			var jit string
			if err := pool.QueryRow(ctx, `SHOW jit`).Scan(&jit); err != nil || jit != "on" {
				t.Errorf("the pool's sessions have jit %q (%v), want their own setting, on", jit, err)
			}
		})
	}
}

// The claim, the mark and the replay's read leave the pool's one session
// as they found it whatever their ends: answered, refused by a fence,
// retried after the server forgot their prepared statements (DEALLOCATE
// ALL, DISCARD ALL, on the session; last, unfenced, as pgx's own
// statement cache of the ledger's other statements is stale after them).
// After each, the next statement on the pool runs on the same session, out of any transaction, with its own jit setting.
func TestTheLedgersSessionKeepsItsOwnJITAfterEveryEndOfAClaimMarkOrRead(t *testing.T) {
	l, pool, _ := onePooled(t)
	ctx := deadline(t, time.Minute)
	var pid uint32
	check := func(after string) {
		t.Helper()
		c, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Release()
		if pc := c.Conn().PgConn(); pc.TxStatus() != 'I' || pc.IsBusy() || (pid != 0 && pc.PID() != pid) {
			t.Errorf("after %s: session %d (want %d), transaction status %q, busy %v", after, pc.PID(), pid, pc.TxStatus(), pc.IsBusy())
		} else {
			pid = pc.PID()
		}
		var jit string
		if err := c.Conn().QueryRow(ctx, `SHOW jit`, pgx.QueryExecModeSimpleProtocol).Scan(&jit); err != nil || jit != "on" {
			t.Errorf("after %s: the session's jit %q (%v), want on", after, jit, err)
		}
	}
	check("nothing")
	p := processor.PartitionRef{Topic: "events", Partition: 0}
	epochs, err := l.Own(ctx, processor.Ownership{Group: "g", Member: "zombie", Parts: []processor.PartitionRef{p}})
	if err != nil {
		t.Fatal(err)
	}
	old := decide.Fence{Group: "g", Epoch: epochs[0]}
	a, b := intent("jit-end-a", "A"), intent("jit-end-b", "B")
	for _, in := range []*decide.Intent{&a, &b} {
		in.Topic, in.Partition, in.Fence = p.Topic, p.Partition, old
	}
	b.Offset = 1
	want(t, claim(t, l, a, b), decide.VerdictNew, decide.VerdictNew)
	check("a claim")
	if err := l.MarkStarted(ctx, []processor.Started{{WorkflowID: a.WorkflowID, RunID: "r", Generation: 1, Topic: p.Topic, Partition: p.Partition, Fence: old}}); err != nil {
		t.Fatal(err)
	}
	check("a mark")
	want(t, claim(t, l, a), decide.VerdictDuplicate)
	want(t, claim(t, l, a), decide.VerdictDuplicate) // the replay's read
	check("a replay's read")
	if _, err := l.Own(ctx, processor.Ownership{Group: "g", Member: "owner", Parts: []processor.PartitionRef{p}}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Claim(ctx, []decide.Intent{b}); err == nil {
		t.Fatal("the zombie's claim after the new owner's bump answered")
	} else if _, ok := processor.IsFenced(err); !ok {
		t.Fatalf("the zombie's claim: %v, want the fence's refusal", err)
	}
	check("a claim its fence refused")
	err = l.MarkStarted(ctx, []processor.Started{{WorkflowID: b.WorkflowID, RunID: "r", Generation: 1, Topic: p.Topic, Partition: p.Partition, Fence: old}})
	if _, ok := processor.IsFenced(err); !ok {
		t.Fatalf("the zombie's mark: %v, want the fence's refusal", err)
	}
	check("a mark its fence refused")
	want(t, claim(t, l, intent("jit-end-d", "D")), decide.VerdictNew)
	check("the claim after them")
	// Last: pgx's own statement cache, which the ledger's other
	// statements use, does not survive them.
	plain := a
	plain.Fence = decide.Fence{}
	for _, forget := range []string{`DEALLOCATE ALL`, `DISCARD ALL`} {
		if _, err := pool.Exec(ctx, forget, pgx.QueryExecModeSimpleProtocol); err != nil {
			t.Fatal(err)
		}
		want(t, claim(t, l, plain), decide.VerdictDuplicate)
		check("a replay's read after " + forget)
		if _, err := pool.Exec(ctx, forget, pgx.QueryExecModeSimpleProtocol); err != nil {
			t.Fatal(err)
		}
		c := intent("jit-end-c-"+forget, "C")
		want(t, claim(t, l, c), decide.VerdictNew)
		check("a claim after " + forget)
		if _, err := pool.Exec(ctx, forget, pgx.QueryExecModeSimpleProtocol); err != nil {
			t.Fatal(err)
		}
		if err := l.MarkStarted(ctx, []processor.Started{{WorkflowID: c.WorkflowID, RunID: "r", Generation: 1}}); err != nil {
			t.Fatalf("a mark after %s: %v", forget, err)
		}
		check("a mark after " + forget)
	}
}
