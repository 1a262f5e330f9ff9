package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/dedupio/dedup/internal/testsupport/pgbouncer"
	"github.com/dedupio/dedup/internal/testsupport/pgtest"
	"github.com/dedupio/dedup/processor"
	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/processor/ledgertest"
	"github.com/dedupio/dedup/sink/ledger"
	"github.com/dedupio/dedup/sink/ledger/pooler"
)

// openPooled migrates a fresh database directly (migrations take a
// session lock: never through a transaction pooler) and opens n ledgers
// through a PgBouncer in front of it, in mode, with postgres.pooler
// naming it.
func openPooled(t *testing.T, mode pgbouncer.Mode, n int) []*ledger.Postgres {
	t.Helper()
	url := pgtest.NewDatabase(t)
	ctx := context.Background()
	if err := ledger.Migrate(ctx, url); err != nil {
		t.Fatal(err)
	}
	b := pgbouncer.Start(t, url, pgbouncer.Options{Mode: mode})
	out := make([]*ledger.Postgres, n)
	for i := range out {
		cfg := ledger.DefaultConfig()
		cfg.URL = b.URL(url)
		cfg.Pooler = pooler.Mode(mode)
		l, err := ledger.Open(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(l.Close)
		out[i] = l
	}
	return out
}

// retriedAfterDeadlock runs fn again while PostgreSQL aborts it as a
// deadlock (40P01), at most five times: what the router's retry does with
// that transient error.
func retriedAfterDeadlock(fn func() error) error {
	for try := 0; ; try++ {
		err := fn()
		var pgErr *pgconn.PgError
		if err == nil || try == 5 || !errors.As(err, &pgErr) || pgErr.Code != "40P01" {
			return err
		}
	}
}

// Three routers' ledgers (four connections each) share PgBouncer's two
// server connections in transaction pooling: each claims the same events
// (in its own order), marks what it won, and looks them up, all at once.
// Every event gets exactly one new verdict and ends as one started row.
// A deadlock is retried, as the router's health.retry does (ledger.Transient):
// on this small table a mark's UPDATE ... FROM unnest may scan the table
// rather than probe the key index, and so lock rows in another order than a
// claim (a fresh clone's CI run once hit it: "mark started: deadlock
// detected (SQLSTATE 40P01)"); PostgreSQL rolls the statement back whole.
func TestClaimThroughTransactionPoolerKeepsOneRowPerEvent(t *testing.T) {
	const routers, rounds, n = 3, 20, 50
	ls := openPooled(t, pgbouncer.Transaction, routers)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	news := make([]int, routers)
	var wg sync.WaitGroup
	errs := make(chan error, routers)
	for r, l := range ls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := range rounds {
				in := make([]decide.Intent, n)
				for i := range in {
					j := (i + r*17) % n // another order per router
					in[i] = intent(fmt.Sprintf("r%d-e%d", round, j), "same")
				}
				// Several ledger calls at once per router, as its claimer,
				// marker and readiness probe make them.
				var inner sync.WaitGroup
				var cl []decide.Claimed
				var cerr, lerr error
				inner.Add(2)
				go func() {
					defer inner.Done()
					cerr = retriedAfterDeadlock(func() (err error) { cl, err = l.Claim(ctx, in); return err })
				}()
				go func() { defer inner.Done(); _, lerr = l.Lookup(ctx, []string{in[0].WorkflowID, in[1].WorkflowID}) }()
				inner.Wait()
				if cerr != nil || lerr != nil {
					errs <- fmt.Errorf("router %d, round %d: claim: %v, lookup: %v", r, round, cerr, lerr)
					return
				}
				var won []processor.Started
				for i, c := range cl {
					if c.Verdict == decide.VerdictNew {
						news[r]++
						won = append(won, processor.Started{WorkflowID: in[i].WorkflowID, RunID: fmt.Sprintf("run-%d", r), Generation: c.Generation})
					}
				}
				if err := retriedAfterDeadlock(func() error { return l.MarkStarted(ctx, won) }); err != nil {
					errs <- fmt.Errorf("router %d, round %d: mark started: %v", r, round, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		return
	}
	total := 0
	for _, k := range news {
		total += k
	}
	if total != rounds*n {
		t.Errorf("%d new verdicts across the routers, want %d (one per event)", total, rounds*n)
	}
	counts, err := ls[0].Count(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if counts != (ledger.Counts{Started: rounds * n}) {
		t.Errorf("ledger %+v, want %d started rows and nothing else", counts, rounds*n)
	}
}

// The Ledger contract holds through PgBouncer in transaction pooling, as
// on a direct connection.
func TestLedgerContractThroughTransactionPooler(t *testing.T) {
	ledgertest.Run(t, func(t *testing.T) ledgertest.Subject {
		l := openPooled(t, pgbouncer.Transaction, 1)[0]
		return ledgertest.Subject{Ledger: l, Row: func(ctx context.Context, id string) (decide.LedgerState, string, bool, error) {
			rows, err := l.Lookup(ctx, []string{id})
			e, ok := rows[id]
			return e.State, e.RunID, ok, err
		}}
	})
}

// Through a transaction pooler that postgres.pooler does not name, the
// second client's claim meets the first one's prepared statement on the
// one server session they share (SQLSTATE 42P05): a permanent error (it
// never heals) that names the setting to change.
func TestClaimThroughUnnamedTransactionPoolerNamesTheSetting(t *testing.T) {
	url := pgtest.NewDatabase(t)
	ctx := context.Background()
	if err := ledger.Migrate(ctx, url); err != nil {
		t.Fatal(err)
	}
	b := pgbouncer.Start(t, url, pgbouncer.Options{Mode: pgbouncer.Transaction, PoolSize: 1})
	var ls [2]*ledger.Postgres
	for i := range ls {
		cfg := ledger.DefaultConfig()
		cfg.URL = b.URL(url) // postgres.pooler left at none
		l, err := ledger.Open(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(l.Close)
		ls[i] = l
	}
	if _, err := ls[0].Claim(ctx, []decide.Intent{intent("a", "p")}); err != nil {
		t.Fatalf("first client's claim: %v", err)
	}
	_, err := ls[1].Claim(ctx, []decide.Intent{intent("b", "p")})
	if err == nil {
		t.Fatal("second client's claim through the shared session passed: its statement was not prepared by name")
	}
	if !processor.IsPermanent(err) || !errors.Is(err, pooler.ErrTransactionPooler) || !strings.Contains(err.Error(), "set postgres.pooler: transaction") {
		t.Fatalf("claim error %q (permanent: %v): want a permanent error naming postgres.pooler", err, processor.IsPermanent(err))
	}
}

// The replay's read (six array parameters, int4[] and
// int8[] among them) runs through a transaction pooler with unnamed
// statements, and answers the replayed records as duplicates.
func TestReplayReadAnswersThroughTransactionPooler(t *testing.T) {
	l := openPooled(t, pgbouncer.Transaction, 1)[0]
	ctx := context.Background()
	var in []decide.Intent
	var st []processor.Started
	for i := range 4 {
		x := intent(fmt.Sprintf("p%d", i), "same")
		x.Partition, x.Offset = int32(i%2), int64(100+i)
		in = append(in, x)
		st = append(st, processor.Started{WorkflowID: x.WorkflowID, RunID: "r", Generation: 1})
	}
	claim(t, l, in...)
	if err := l.MarkStarted(ctx, st); err != nil {
		t.Fatal(err)
	}
	want(t, claim(t, l, in...), decide.VerdictDuplicate, decide.VerdictDuplicate, decide.VerdictDuplicate, decide.VerdictDuplicate)
	other := intent("p0", "other")
	other.Partition, other.Offset = 0, 100
	want(t, claim(t, l, in[0], in[1], other, in[3]), decide.VerdictDuplicate, decide.VerdictDuplicate, decide.VerdictConflict, decide.VerdictDuplicate)
}

// MarkStarted's and MarkDeadLettered's statements are package variables
// now (29e298e), the same text as before: through PgBouncer in
// transaction pooling, three routers' ledgers, each owning its own
// partition (a fence, epoch > 0), claim their events and mark half
// started and half dead-lettered, round after round and all at once, so
// that each statement runs on every one of the two server sessions, after
// the others'. Every mark lands: each ledger's rows end started or
// dead_lettered as marked, none pending. (adversary 32)
func TestFencedMarksThroughTransactionPoolerLand(t *testing.T) {
	const routers, rounds, n = 3, 15, 20
	ls := openPooled(t, pgbouncer.Transaction, routers)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, routers)
	for r, l := range ls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			part := processor.PartitionRef{Topic: "events", Partition: int32(r)}
			epochs, err := l.Own(ctx, processor.Ownership{Group: "g", Member: fmt.Sprintf("m%d", r), Generation: 1, Parts: []processor.PartitionRef{part}})
			if err != nil || len(epochs) != 1 || epochs[0] == 0 {
				errs <- fmt.Errorf("router %d: Own: %v %v", r, epochs, err)
				return
			}
			fence := decide.Fence{Group: "g", Epoch: epochs[0]}
			for round := range rounds {
				in := make([]decide.Intent, n)
				for i := range in {
					in[i] = intent(fmt.Sprintf("p%d-r%d-e%d", r, round, i), "x")
					in[i].Partition, in[i].Fence = part.Partition, fence
				}
				var cl []decide.Claimed
				if err := retriedAfterDeadlock(func() (err error) { cl, err = l.Claim(ctx, in); return err }); err != nil {
					errs <- fmt.Errorf("router %d, round %d: claim: %v", r, round, err)
					return
				}
				var started []processor.Started
				var dead []processor.DeadLettered
				for i, c := range cl {
					if c.Verdict != decide.VerdictNew {
						errs <- fmt.Errorf("router %d, round %d: %s: verdict %v, want new", r, round, in[i].WorkflowID, c.Verdict)
						return
					}
					if i%2 == 0 {
						started = append(started, processor.Started{WorkflowID: in[i].WorkflowID, RunID: "run", Generation: c.Generation,
							Topic: part.Topic, Partition: part.Partition, Fence: fence})
					} else {
						dead = append(dead, processor.DeadLettered{WorkflowID: in[i].WorkflowID, Topic: part.Topic, Partition: part.Partition, Fence: fence})
					}
				}
				var inner sync.WaitGroup
				var serr, derr error
				inner.Add(2)
				go func() {
					defer inner.Done()
					serr = retriedAfterDeadlock(func() error { return l.MarkStarted(ctx, started) })
				}()
				go func() {
					defer inner.Done()
					derr = retriedAfterDeadlock(func() error { return l.MarkDeadLettered(ctx, dead) })
				}()
				inner.Wait()
				if serr != nil || derr != nil {
					errs <- fmt.Errorf("router %d, round %d: mark started: %v, mark dead-lettered: %v", r, round, serr, derr)
					return
				}
				for i, s := range started {
					if !s.Recorded {
						errs <- fmt.Errorf("router %d, round %d: started[%d] %s not recorded", r, round, i, s.WorkflowID)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		return
	}
	counts, err := ls[0].Count(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := (ledger.Counts{Started: routers * rounds * n / 2, DeadLettered: routers * rounds * n / 2}); counts != want {
		t.Errorf("ledger %+v, want %+v", counts, want)
	}
}

// adversary 33: the claim, the replay's read and the mark in each of
// pgx's exec modes (postgres.url's default_query_exec_mode): a batch of
// 10,000 new intents with large and negative offsets and partitions at
// the int4 range's ends, marked started, then claimed again (the replay's
// read answers it: duplicates). exec and simple_protocol are left out:
// they failed before the parameter arrays too (a957283: "unable to encode
// [][16]uint8 ... for unknown type (OID 0)"), as pooler.Configure says.
func TestClaimReplayAndMarkInEveryExecMode(t *testing.T) {
	for _, mode := range []string{"cache_statement", "cache_describe", "describe_exec"} {
		t.Run(mode, func(t *testing.T) {
			ctx := context.Background()
			l := openInExecMode(t, mode)
			// short: an encoding error names the whole argument
			short := func(err error) string {
				if s := err.Error(); len(s) > 300 {
					return s[:150] + " … " + s[len(s)-150:]
				}
				return err.Error()
			}
			claimAll := func(what string, batch []decide.Intent, w decide.Verdict) {
				t.Helper()
				cl, err := l.Claim(ctx, batch)
				if err != nil {
					t.Fatalf("%s: %s", what, short(err))
				}
				for i, c := range cl {
					if c.Verdict != w {
						t.Fatalf("%s, intent %d: %v, want %v", what, i, c.Verdict, w)
					}
				}
			}
			const n = 10000
			batch := make([]decide.Intent, n)
			var st []processor.Started
			for i := range batch {
				in := intent(fmt.Sprintf("m%05d", i), "p")
				in.Offset = []int64{1<<63 - 1 - int64(i), -1<<63 + int64(i), 0, -7}[i%4]
				in.Partition = []int32{1<<31 - 1, -1 << 31, 0, -1}[i%4]
				in.Topic = []string{"", "t", "NULL", `a"b\c{,}`}[i%4]
				batch[i] = in
				st = append(st, processor.Started{WorkflowID: in.WorkflowID, RunID: "r", Generation: 1, Topic: in.Topic, Partition: in.Partition})
			}
			claimAll("first claim", batch, decide.VerdictNew)
			if err := l.MarkStarted(ctx, st); err != nil {
				t.Fatalf("mark: %s", short(err))
			}
			claimAll("claim of the started batch", batch, decide.VerdictDuplicate)
			claimAll("replay's read", batch, decide.VerdictDuplicate)
			var bad int
			if err := l.Pool().QueryRow(ctx, `SELECT count(*) FROM dedup_ledger WHERE state <> 'started' OR kafka_offset NOT IN (9223372036854775807 - substr(event_id, 2)::int8, -9223372036854775808 + substr(event_id, 2)::int8, 0, -7)`).Scan(&bad); err != nil {
				t.Fatal(err)
			}
			if bad != 0 {
				t.Fatalf("%d rows not started or with another offset", bad)
			}
		})
	}
}

// adversary 33: through PgBouncer in transaction pooling (unnamed
// statements, cache_describe), a batch of 10,000 intents, one in ten a
// second copy of an ID with another payload, at offsets and partitions
// at their types' ends: new verdicts for the first copies, conflicts for
// the others recorded with the ledger's hash; marked, then claimed again
// twice (the second through the replay's read): duplicates and the same
// conflicts, counted again only where the record is new.
func TestLargeBatchThroughTransactionPoolerKeepsVerdictsAndConflictHashes(t *testing.T) {
	l := openPooled(t, pgbouncer.Transaction, 1)[0]
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const n = 10000
	var batch []decide.Intent
	var st []processor.Started
	for i := range n {
		in := intent(fmt.Sprintf("b%05d", i), "p")
		in.Offset = []int64{1<<63 - 1 - int64(i), -1<<63 + int64(i)}[i%2]
		in.Partition = []int32{1<<31 - 1, -1 << 31}[i%2]
		batch = append(batch, in)
		st = append(st, processor.Started{WorkflowID: in.WorkflowID, RunID: "r", Generation: 1, Topic: in.Topic, Partition: in.Partition})
		if i%10 == 0 {
			c := intent(fmt.Sprintf("b%05d", i), fmt.Sprintf("other%d", i))
			c.Offset = in.Offset
			batch = append(batch, c)
		}
	}
	check := func(what string, first decide.Verdict) {
		t.Helper()
		cl, err := l.Claim(ctx, batch)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		seen := map[string]bool{}
		for i, c := range cl {
			w := first
			if seen[batch[i].WorkflowID] {
				w = decide.VerdictConflict
			}
			seen[batch[i].WorkflowID] = true
			if c.Verdict != w {
				t.Fatalf("%s, intent %d: %v, want %v", what, i, c.Verdict, w)
			}
		}
	}
	check("first claim", decide.VerdictNew)
	if err := l.MarkStarted(ctx, st); err != nil {
		t.Fatal(err)
	}
	check("claim of the started batch", decide.VerdictDuplicate)
	check("replay's read", decide.VerdictDuplicate)
	p := intent("", "p").PayloadHash
	var rows, bad int
	if err := l.Pool().QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE ledger_payload_hash <> $1 OR copies <> 1) FROM dedup_conflicts`, p[:]).Scan(&rows, &bad); err != nil {
		t.Fatal(err)
	}
	if rows != n/10 || bad != 0 {
		t.Fatalf("%d conflict rows, %d with another ledger hash or count; want %d, 0", rows, bad, n/10)
	}
}

// Through a transaction pooler postgres.pooler does not name, the replay's
// read now prepares its statement again and runs once more after a 26000
// (arrays.go): that second run meets another server session too. Three
// routers' ledgers replaying events another router marked started, all at
// once, through PgBouncer's two server sessions: every claim either
// answers or fails with the permanent error that names the setting, never
// with another error (a transient one would stall the router without
// naming the pooler). Bound: which session each message meets is
// PgBouncer's choice, so how many claims answer varies; in 30 rounds of
// three claims at least one meets another client's session (62 and 31
// of 90 did in two runs on the shared 2-core machine).
func TestReplayReadsThroughAnUnnamedTransactionPoolerAnswerOrNameTheSetting(t *testing.T) {
	url := pgtest.NewDatabase(t)
	ctx := context.Background()
	if err := ledger.Migrate(ctx, url); err != nil {
		t.Fatal(err)
	}
	dcfg := ledger.DefaultConfig()
	dcfg.URL = url
	direct, err := ledger.Open(ctx, dcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(direct.Close)
	b := pgbouncer.Start(t, url, pgbouncer.Options{Mode: pgbouncer.Transaction, PoolSize: 2})
	var ls [3]*ledger.Postgres
	for i := range ls {
		cfg := ledger.DefaultConfig()
		cfg.URL = b.URL(url) // postgres.pooler left at none
		l, err := ledger.Open(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(l.Close)
		ls[i] = l
	}
	var (
		mu            sync.Mutex
		named, answer int
		others        []string
	)
	for round := range 30 {
		var in []decide.Intent
		for k := range 4 {
			x := intent(fmt.Sprintf("unnamed-replay-%d-%d", round, k), "p")
			markedStarted(t, direct, x)
			in = append(in, x)
		}
		var wg sync.WaitGroup
		for _, l := range ls {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got, err := l.Claim(ctx, in)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					answer++
					for i, c := range got {
						if c.Verdict != decide.VerdictDuplicate {
							others = append(others, fmt.Sprintf("%s answered %s, want a duplicate", in[i].WorkflowID, c.Verdict))
						}
					}
				case processor.IsPermanent(err) && errors.Is(err, pooler.ErrTransactionPooler):
					named++
				default:
					others = append(others, fmt.Sprintf("permanent %v: %v", processor.IsPermanent(err), err))
				}
			}()
		}
		wg.Wait()
	}
	if len(others) > 0 {
		t.Errorf("%d claims through an unnamed transaction pooler neither answered nor named the setting: %q", len(others), others)
	}
	if named == 0 {
		t.Errorf("no claim of %d named the transaction pooler in the way", answer)
	}
	t.Logf("%d answered, %d named the setting", answer, named)
}

// Through PgBouncer in transaction pooling, a large claim whose fence did
// not hold (its answer read only up to its first row, the rest
// discarded) is refused by its fence, writes nothing, and leaves the
// ledger's connections and PgBouncer's server sessions clean: the same
// ledger's next claims, unfenced and fenced under the new epoch, answer.
func TestAFencedLargeClaimThroughTransactionPoolerIsRefusedAndTheNextClaimsAnswer(t *testing.T) {
	ls := openPooled(t, pgbouncer.Transaction, 2)
	old, cur := ls[0], ls[1]
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := processor.PartitionRef{Topic: "events", Partition: 1}
	stale, err := old.Own(ctx, processor.Ownership{Group: "g", Member: "old", Parts: []processor.PartitionRef{p}})
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := cur.Own(ctx, processor.Ownership{Group: "g", Member: "new", Parts: []processor.PartitionRef{p}})
	if err != nil {
		t.Fatal(err)
	}
	batch := func(prefix string, epoch int64) []decide.Intent {
		in := make([]decide.Intent, 2000)
		for i := range in {
			in[i] = intent(fmt.Sprintf("%s-%d", prefix, i), "x")
			if epoch != 0 {
				in[i].Fence = decide.Fence{Group: "g", Epoch: epoch}
			}
		}
		return in
	}
	for round := range 3 {
		_, err := old.Claim(ctx, batch(fmt.Sprintf("zombie-%d", round), stale[0]))
		if fe, ok := processor.IsFenced(err); !ok || !fe.Has(p.Topic, p.Partition, decide.Fence{Group: "g", Epoch: stale[0]}) {
			t.Fatalf("round %d: the old owner's claim: %v, want the fence's refusal of %v", round, err, p)
		}
		for _, c := range []struct {
			l     *ledger.Postgres
			name  string
			epoch int64
		}{{old, "unfenced", 0}, {old, "fenced-new", fresh[0]}} {
			in := batch(fmt.Sprintf("%s-%d", c.name, round), c.epoch)
			cl, err := c.l.Claim(ctx, in)
			if err != nil {
				t.Fatalf("round %d: the %s claim after the refused one: %v", round, c.name, err)
			}
			for i, v := range cl {
				if v.Verdict != decide.VerdictNew {
					t.Fatalf("round %d: %s intent %d: %v, want new", round, c.name, i, v.Verdict)
				}
			}
		}
	}
	var n int
	if err := cur.Pool().QueryRow(ctx, `SELECT count(*) FROM dedup_ledger WHERE workflow_id LIKE '%zombie-%'`).Scan(&n); err != nil || n != 0 {
		t.Errorf("%d rows written by the refused claims (%v), want none", n, err)
	}
}

// Behind PgBouncer in transaction pooling (postgres.pooler: transaction,
// one server session), the replay's read by runs, through the ledger's
// own claim, leaves the server session it ran on to the next client with
// the server's jit and plan_cache_mode: every batch's generic plan is
// its own transaction's.
func TestTheReplaysReadByRunsLeavesNoPlanCacheModeOnTheServerSessionATransactionPoolerHandsOn(t *testing.T) {
	url := pgtest.NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := ledger.Migrate(ctx, url); err != nil {
		t.Fatal(err)
	}
	b := pgbouncer.Start(t, url, pgbouncer.Options{Mode: pgbouncer.Transaction, PoolSize: 1})
	cfg := ledger.DefaultConfig()
	cfg.URL = b.URL(url)
	cfg.Pooler = pooler.Transaction
	l, err := ledger.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	other, err := pgx.Connect(ctx, b.URL(url))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Close(context.Background()) }()
	batch, started := aReplay(t, l, "bounced", 40)
	for round := range 4 {
		claim(t, l, batch...)
		var jit, plans string
		if err := other.QueryRow(ctx, `SELECT current_setting('jit'), current_setting('plan_cache_mode')`, pgx.QueryExecModeSimpleProtocol).Scan(&jit, &plans); err != nil {
			t.Fatal(err)
		}
		if jit != "on" || plans != "auto" {
			t.Errorf("round %d: the next client of the server session sees jit %q and plan_cache_mode %q, want on and auto", round, jit, plans)
		}
		if err := l.MarkStarted(ctx, started); err != nil {
			t.Fatal(err)
		}
	}
}

// openInExecMode is a ledger on a new migrated database whose pool runs
// its statements in pgx's exec mode mode (default_query_exec_mode).
func openInExecMode(t *testing.T, mode string) *ledger.Postgres {
	t.Helper()
	url := pgtest.NewDatabase(t)
	ctx := context.Background()
	if err := ledger.Migrate(ctx, url); err != nil {
		t.Fatal(err)
	}
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	cfg := ledger.DefaultConfig()
	cfg.URL = url + sep + "default_query_exec_mode=" + mode
	l, err := ledger.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	return l
}
