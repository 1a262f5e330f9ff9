package ledger_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	neturl "net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dedupio/dedup/internal/testsupport/pgtest"
	"github.com/dedupio/dedup/processor"
	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/sink/ledger"
)

// openWithURL is open, with the database's URL for a second connection.
func openWithURL(t *testing.T) (*ledger.Postgres, string) {
	t.Helper()
	url := pgtest.NewDatabase(t)
	ctx := context.Background()
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
	return l, url
}

// waitLockWait waits until some session of the database waits for a lock.
func waitLockWait(t *testing.T, conn *pgx.Conn) {
	t.Helper()
	deadline := time.Now().Add(lockWaitPatience)
	for time.Now().Before(deadline) {
		var n int
		if err := conn.QueryRow(context.Background(),
			`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("no session waits for a lock after " + lockWaitPatience.String())
}

// A claim whose statement began while the new owner's bump was not
// committed yet (its snapshot still shows the old epoch) waits for the
// bump and then finds the fence moved: nothing written. This is the
// interleaving of a slow claim across a revoke: the fence is checked
// against the owner row's latest version, under a lock, not against the
// statement's snapshot.
func TestClaimThatWaitedForTheNewOwnersBumpWritesNothing(t *testing.T) {
	l, url := openWithURL(t)
	ctx := context.Background()
	p := processor.PartitionRef{Topic: "events", Partition: 0}
	epochs, err := l.Own(ctx, processor.Ownership{Group: "g", Member: "old", Parts: []processor.PartitionRef{p}})
	if err != nil {
		t.Fatal(err)
	}
	old := decide.Fence{Group: "g", Epoch: epochs[0]}

	bump, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = bump.Close(ctx) }()
	tx, err := bump.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `UPDATE dedup_partition_owners SET epoch = epoch + 1 WHERE consumer_group = 'g' AND topic = 'events' AND kafka_partition = 0`); err != nil {
		t.Fatal(err)
	}
	a := intent("a", "A")
	a.Topic, a.Partition, a.Fence = p.Topic, p.Partition, old
	done := make(chan error, 1)
	go func() {
		_, err := l.Claim(ctx, []decide.Intent{a})
		done <- err
	}()
	watch, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = watch.Close(ctx) }()
	waitLockWait(t, watch)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	err = <-done
	var f *processor.FencedError
	if !errors.As(err, &f) || len(f.Stale) != 1 || f.Stale[0].Epoch != old.Epoch {
		t.Fatalf("claim under epoch %d after the bump: err %v, want the fence's refusal", old.Epoch, err)
	}
	rows, err := l.Lookup(ctx, []string{a.WorkflowID})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := rows[a.WorkflowID]; ok {
		t.Fatalf("the fenced claim wrote row %+v", rows[a.WorkflowID])
	}
}

// The new owner's bump waits for a claim in flight under the old epoch
// (its share lock on the owner row), so that claim lands whole before the
// new owner's first claim, which then sees its row: re-drive, not lost.
func TestOwnWaitsForTheOldOwnersClaimInFlight(t *testing.T) {
	l, url := openWithURL(t)
	ctx := context.Background()
	p := processor.PartitionRef{Topic: "events", Partition: 0}
	epochs, err := l.Own(ctx, processor.Ownership{Group: "g", Member: "old", Parts: []processor.PartitionRef{p}})
	if err != nil {
		t.Fatal(err)
	}
	// A claim's lock, held open: the statement's share lock on the owner
	// row, as the claim statement takes it.
	claimConn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = claimConn.Close(ctx) }()
	tx, err := claimConn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var e int64
	if err := tx.QueryRow(ctx, `SELECT epoch FROM dedup_partition_owners WHERE consumer_group = 'g' AND topic = 'events' AND kafka_partition = 0 FOR SHARE`).Scan(&e); err != nil {
		t.Fatal(err)
	}
	if e != epochs[0] {
		t.Fatalf("epoch %d, want %d", e, epochs[0])
	}
	type owned struct {
		epochs []int64
		err    error
	}
	done := make(chan owned, 1)
	go func() {
		e, err := l.Own(ctx, processor.Ownership{Group: "g", Member: "new", Parts: []processor.PartitionRef{p}})
		done <- owned{e, err}
	}()
	watch, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = watch.Close(ctx) }()
	waitLockWait(t, watch)
	select {
	case o := <-done:
		t.Fatalf("Own returned %v, %v while a claim held the old epoch", o.epochs, o.err)
	default:
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	o := <-done
	if o.err != nil || len(o.epochs) != 1 || o.epochs[0] != epochs[0]+1 {
		t.Fatalf("Own after the claim: %v, %v; want epoch %d", o.epochs, o.err, epochs[0]+1)
	}
}

// Two consumer groups that read one topic into one ledger fence only
// their own routers: a bump in one group leaves the other's epochs.
func TestFenceIsPerConsumerGroup(t *testing.T) {
	l, _ := openWithURL(t)
	ctx := context.Background()
	p := []processor.PartitionRef{{Topic: "events", Partition: 0}}
	ea, err := l.Own(ctx, processor.Ownership{Group: "a", Member: "m", Parts: p})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Own(ctx, processor.Ownership{Group: "b", Member: "m", Parts: p}); err != nil {
		t.Fatal(err)
	}
	in := intent("x", "X")
	in.Topic, in.Partition, in.Fence = "events", 0, decide.Fence{Group: "a", Epoch: ea[0]}
	if v, err := l.Claim(ctx, []decide.Intent{in}); err != nil || v[0].Verdict != decide.VerdictNew {
		t.Fatalf("group a's claim after group b's bump: %v, %v; want new", v, err)
	}
}

// A claim under a stale epoch is refused even when the ledger answers it
// from the started rows alone (the replay path: the previous batch was
// mostly started, so a read-only statement answers first and the claim
// statement, which checks the fence, never runs). Here a zombie's copy
// with another payload of a started row: the ledger answers it a
// conflict, records the conflict (a write to dedup_conflicts) and the
// router dead-letters the record, although the partition moved. Fails on
// the current code: the claim returns a conflict verdict, no FencedError,
// and the conflict row is written.
func TestAStaleClaimAnsweredFromStartedRowsIsRefused(t *testing.T) {
	l, _ := openWithURL(t)
	ctx := context.Background()
	p := processor.PartitionRef{Topic: "events", Partition: 0}
	epochs, err := l.Own(ctx, processor.Ownership{Group: "g", Member: "zombie", Parts: []processor.PartitionRef{p}})
	if err != nil {
		t.Fatal(err)
	}
	old := decide.Fence{Group: "g", Epoch: epochs[0]}
	a := intent("a", "A")
	a.Topic, a.Partition, a.Fence = p.Topic, p.Partition, old
	if _, err := l.Claim(ctx, []decide.Intent{a}); err != nil {
		t.Fatal(err)
	}
	if err := l.MarkStarted(ctx, []processor.Started{{WorkflowID: a.WorkflowID, RunID: "run", Generation: 1,
		Topic: p.Topic, Partition: p.Partition, Fence: old}}); err != nil {
		t.Fatal(err)
	}
	// A batch of started rows: the ledger takes the replay path next.
	if v, err := l.Claim(ctx, []decide.Intent{a}); err != nil || v[0].Verdict != decide.VerdictDuplicate {
		t.Fatalf("claim of a started row: %v, %v; want a duplicate", v, err)
	}
	if _, err := l.Own(ctx, processor.Ownership{Group: "g", Member: "owner", Parts: []processor.PartitionRef{p}}); err != nil {
		t.Fatal(err)
	}

	other := intent("a", "other payload")
	other.Topic, other.Partition, other.Fence, other.Offset = p.Topic, p.Partition, old, 7
	v, err := l.Claim(ctx, []decide.Intent{other})
	if _, ok := processor.IsFenced(err); !ok {
		t.Errorf("the zombie's claim after the new owner's bump: %v, %v; want the fence's refusal", v, err)
	}
	var n int
	if err := l.Pool().QueryRow(ctx, `SELECT count(*) FROM dedup_conflicts WHERE workflow_id = $1`, a.WorkflowID).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("the zombie's claim recorded %d conflicts after the partition moved", n)
	}
}

// A claim is refused from the statement that finds the fence moved on;
// what its earlier statements wrote under the fence stands, as a claim
// that landed before the new owner's bump (processor.Ledger.Claim). The
// claim of a batch that re-claims a dead_lettered row through a copy that
// is not the first of its ID (the first conflicts) takes two statements:
// the claim statement, then the revive, each under the fence. When the new
// owner's bump is queued behind the claim statement, it lands between the
// two: the revive is refused (the dead_lettered row is the new owner's and
// stays so), and the rows the claim statement wrote before the bump stay
// (row y, of the partition still held: the router claims it again and gets
// its verdict, re-drive, and starts it). Interleaving: the claim statement
// is held on a ledger row lock until the bump waits for its share lock and
// a gate session waits for the claim's lock on the ledger table (SHARE,
// which the claim's ROW EXCLUSIVE holds off and the revive's ROW EXCLUSIVE
// waits for). When the claim statement commits, the gate is granted the
// table lock at once (PostgreSQL grants a queued lock at the release) and
// the bump goes on; the revive waits at the gate until the bump's update
// holds the owner row, then waits for the bump, held open until then. So
// the revive always runs after the bump took the row: a share lock taken
// on a row whose locker committed does not queue behind a waiting update,
// and without the gate the revive could land before the bump (committed
// before it, as the fence allows) and the refusal come from the conflict
// record instead. What holds is that nothing is written after the bump
// (not that nothing is written at all).
func TestAClaimRefusedAtItsReviveWritesNothingAfterTheBump(t *testing.T) {
	l, url := openWithURL(t)
	ctx := context.Background()
	p1, p2 := processor.PartitionRef{Topic: "events", Partition: 1}, processor.PartitionRef{Topic: "events", Partition: 2}
	epochs, err := l.Own(ctx, processor.Ownership{Group: "g", Member: "r", Parts: []processor.PartitionRef{p1, p2}})
	if err != nil {
		t.Fatal(err)
	}
	f1, f2 := decide.Fence{Group: "g", Epoch: epochs[0]}, decide.Fence{Group: "g", Epoch: epochs[1]}
	x := intent("x", "A")
	x.Fence = f1
	if _, err := l.Claim(ctx, []decide.Intent{x}); err != nil {
		t.Fatal(err)
	}
	if err := l.MarkDeadLettered(ctx, []processor.DeadLettered{{WorkflowID: x.WorkflowID, Topic: "events", Partition: 1, Fence: f1}}); err != nil {
		t.Fatal(err)
	}
	// The first copy of x conflicts: the claim statement, which takes the
	// first copy of each ID, leaves row x dead_lettered, and the second
	// copy's re-claim is the revive.
	conflicting := intent("x", "B")
	conflicting.Fence = f1
	y := intent("y", "Y")
	y.Partition, y.Fence = 2, f2

	connect := func() *pgx.Conn {
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close(ctx) })
		return c
	}
	holder, watch, gate, bumper := connect(), connect(), connect(), connect()
	tx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT 1 FROM dedup_ledger WHERE workflow_id = $1 FOR UPDATE`, x.WorkflowID); err != nil {
		t.Fatal(err)
	}
	claimed := make(chan error, 1)
	go func() {
		_, err := l.Claim(ctx, []decide.Intent{conflicting, x, y})
		claimed <- err
	}()
	waitLockWait(t, watch) // the claim statement, on row x
	gtx, err := gate.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	gated := make(chan error, 1)
	go func() {
		_, err := gtx.Exec(ctx, `LOCK TABLE dedup_ledger IN SHARE MODE`)
		gated <- err
	}()
	waitLockWaits(t, watch, 2) // the claim statement; the gate, on the claim's table lock
	// The new owner's bump, in a transaction held open until the revive
	// waits for it: it waits for the claim statement's share lock first.
	btx, err := bumper.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	bumped := make(chan error, 1)
	go func() {
		_, err := btx.Exec(ctx, `UPDATE dedup_partition_owners SET epoch = epoch + 1, owner = 'new' WHERE consumer_group = 'g' AND topic = 'events' AND kafka_partition = 1`)
		bumped <- err
	}()
	waitLockWaits(t, watch, 3) // and the bump, on the claim's share lock
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// The claim statement committed: the gate holds the ledger table, the
	// bump holds the owner row.
	if err := <-gated; err != nil {
		t.Fatal(err)
	}
	if err := <-bumped; err != nil {
		t.Fatal(err)
	}
	if err := gtx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// The revive now waits for the bump (a row lock: a transaction ID).
	deadline := time.Now().Add(lockWaitPatience)
	for waiting := 0; waiting == 0; {
		select {
		case err := <-claimed:
			t.Fatalf("claim returned (%v) before its revive waited for the bump; want the revive sent", err)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("the revive does not wait for the bump after " + lockWaitPatience.String())
		}
		if err := watch.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
			AND wait_event_type = 'Lock' AND wait_event = 'transactionid' AND query LIKE '%SET state = ''pending''%'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
	}
	if err := btx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	claimErr := <-claimed
	if _, ok := processor.IsFenced(claimErr); !ok {
		t.Fatalf("claim: %v; want the revive refused", claimErr)
	}
	rows, err := l.Lookup(ctx, []string{x.WorkflowID, y.WorkflowID})
	if err != nil {
		t.Fatal(err)
	}
	if r := rows[x.WorkflowID]; r.State != decide.LedgerDeadLettered {
		t.Errorf("row x after the refused revive: %q, want dead_lettered (the new owner's)", r.State)
	}
	if r, ok := rows[y.WorkflowID]; !ok || r.State != decide.LedgerPending {
		t.Errorf("row y, claimed before the bump: %+v (present %v), want pending", r, ok)
	}
	v, err := l.Claim(ctx, []decide.Intent{y})
	if err != nil || v[0].Verdict != decide.VerdictRedrive {
		t.Errorf("the router's claim of the rest (y, its partition held): %v, %v; want re-drive", v, err)
	}
}

// waitLockWaits waits until n sessions of the database wait for a lock.
func waitLockWaits(t *testing.T, conn *pgx.Conn, n int) {
	t.Helper()
	deadline := time.Now().Add(lockWaitPatience)
	for {
		var got int
		if err := conn.QueryRow(context.Background(),
			`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d sessions wait for a lock after %s, want %d", got, lockWaitPatience, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A mark whose fence no longer holds locks none of its rows: the new
// owner's claims and marks of them must not wait for it. Here the old
// owner's mark names x (partition 1, bumped by the new owner) and y
// (partition 2, still its own) while another transaction holds x's row: a
// mark that locked x before checking its fence would wait for that
// transaction; one that locks only the rows whose fence holds ends at
// once, writes y and names partition 1 stale.
func TestAMarkWhoseFenceNoLongerHoldsLocksNoneOfItsRows(t *testing.T) {
	for _, m := range []struct {
		name, state string
		mark        func(l *ledger.Postgres, ctx context.Context, ids []string, fences []decide.Fence, parts []int32) error
	}{
		{"MarkStarted", "started", func(l *ledger.Postgres, ctx context.Context, ids []string, fences []decide.Fence, parts []int32) error {
			st := make([]processor.Started, len(ids))
			for i, id := range ids {
				st[i] = processor.Started{WorkflowID: id, RunID: "r1", Generation: 1, Topic: "events", Partition: parts[i], Fence: fences[i]}
			}
			return l.MarkStarted(ctx, st)
		}},
		{"MarkDeadLettered", "dead_lettered", func(l *ledger.Postgres, ctx context.Context, ids []string, fences []decide.Fence, parts []int32) error {
			dl := make([]processor.DeadLettered, len(ids))
			for i, id := range ids {
				dl[i] = processor.DeadLettered{WorkflowID: id, Topic: "events", Partition: parts[i], Fence: fences[i]}
			}
			return l.MarkDeadLettered(ctx, dl)
		}},
	} {
		t.Run(m.name, func(t *testing.T) {
			l := open(t)
			ctx := context.Background()
			p1, p2 := processor.PartitionRef{Topic: "events", Partition: 1}, processor.PartitionRef{Topic: "events", Partition: 2}
			fs, err := l.Own(ctx, processor.Ownership{Group: "g", Member: "old", Parts: []processor.PartitionRef{p1, p2}})
			if err != nil {
				t.Fatal(err)
			}
			f1, f2 := decide.Fence{Group: "g", Epoch: fs[0]}, decide.Fence{Group: "g", Epoch: fs[1]}
			x, y := intent("x", "X"), intent("y", "Y")
			x.Fence, y.Partition, y.Fence = f1, 2, f2
			want(t, claim(t, l, x, y), decide.VerdictNew, decide.VerdictNew)
			if _, err := l.Own(ctx, processor.Ownership{Group: "g", Member: "new", Parts: []processor.PartitionRef{p1}}); err != nil {
				t.Fatal(err)
			}
			side := sidePool(t, l.Pool().Config().ConnString())
			hold := holdRows(t, side, "dedup_ledger", x.WorkflowID) // the new owner's claim of x, say
			done := make(chan error, 1)
			go func() {
				done <- m.mark(l, ctx, []string{x.WorkflowID, y.WorkflowID}, []decide.Fence{f1, f2}, []int32{1, 2})
			}()
			var markErr error
			select {
			case markErr = <-done:
			case <-time.After(15 * time.Second):
				t.Errorf("%s under partition 1's old epoch waited 15s for x's row, held by another transaction: it locks a row whose fence no longer holds\n%s",
					m.name, sessions(side))
				_ = hold.Rollback(ctx)
				markErr = <-done
			}
			var f *processor.FencedError
			if !errors.As(markErr, &f) || len(f.Stale) != 1 || f.Stale[0].Partition != 1 {
				t.Errorf("%s: %v, want a *FencedError naming partition 1", m.name, markErr)
			}
			_ = hold.Rollback(ctx)
			rows, err := l.Lookup(ctx, []string{x.WorkflowID, y.WorkflowID})
			if err != nil {
				t.Fatal(err)
			}
			if got := string(rows[x.WorkflowID].State); got != "pending" {
				t.Errorf("x after the stale mark: %q, want pending", got)
			}
			if got := string(rows[y.WorkflowID].State); got != m.state {
				t.Errorf("y after the mark: %q, want %s", got, m.state)
			}
		})
	}
}

// endLog records how a pool's tracer hears each statement end: its SQL
// (from the start) and the error it ended with.
type endLog struct {
	mu   sync.Mutex
	ends []queryEnd
}

type queryEnd struct {
	sql string
	err error
}

type endLogSQL struct{}

func (e *endLog) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	return context.WithValue(ctx, endLogSQL{}, d.SQL)
}

func (e *endLog) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryEndData) {
	sql, _ := ctx.Value(endLogSQL{}).(string)
	e.mu.Lock()
	e.ends = append(e.ends, queryEnd{sql, d.Err})
	e.mu.Unlock()
}

// A claim refused by its fence is a statement that ran and answered: the
// fence's refusal is the ledger's reading of its answer, not a failure of
// the statement. A pool's tracer (NewFromPool: pgx's tracelog, an
// OpenTelemetry tracer) hears it end without an error, as pgx's own Query
// ended it, and not as a failed query on every zombie's claim.
func TestAPoolsTracerHearsAFencedClaimEndWithoutAnError(t *testing.T) {
	pc, err := pgxpool.ParseConfig(open(t).Pool().Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	log := &endLog{}
	pc.ConnConfig.Tracer = log
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	l := ledger.NewFromPool(pool)
	ctx := context.Background()
	p := processor.PartitionRef{Topic: "events", Partition: 1}
	epochs, err := l.Own(ctx, processor.Ownership{Group: "g", Member: "old", Parts: []processor.PartitionRef{p}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Own(ctx, processor.Ownership{Group: "g", Member: "new", Parts: []processor.PartitionRef{p}}); err != nil {
		t.Fatal(err)
	}
	a := intent("traced-fenced", "A")
	a.Fence = decide.Fence{Group: "g", Epoch: epochs[0]}
	log.mu.Lock()
	log.ends = nil
	log.mu.Unlock()
	_, err = l.Claim(ctx, []decide.Intent{a})
	if _, ok := processor.IsFenced(err); !ok {
		t.Fatalf("a claim under the old epoch: %v, want the fence's refusal", err)
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	claims := 0
	for _, e := range log.ends {
		if !strings.Contains(e.sql, "INSERT INTO dedup_ledger") {
			continue
		}
		claims++
		if e.err != nil {
			t.Errorf("the pool's tracer heard the fenced claim's statement end with %v, want no error (pgx's Query: the statement answered)", e.err)
		}
	}
	if claims != 1 {
		t.Errorf("the tracer heard %d claim statements end, want 1", claims)
	}
}

// cutAfterRow is a TCP proxy to a PostgreSQL server that, once armed,
// passes the server's messages up to and including the next DataRow and
// then cuts that connection (a network or a server gone right after the
// first row of an answer); it disarms itself. The row of jitOffSQL, which
// runs before the claim (nojit.go), is not one: it passes. Every other connection, before and after, goes through
// untouched.
type cutAfterRow struct {
	url   string
	armed atomic.Bool
	cut   atomic.Int32
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

// jitOffRow is the body of the DataRow answering jitOffSQL: one column,
// "off", in text.
var jitOffRow = []byte{0, 1, 0, 0, 0, 3, 'o', 'f', 'f'}

func newCutAfterRow(t *testing.T, serverURL string) *cutAfterRow {
	t.Helper()
	u, err := neturl.Parse(serverURL)
	if err != nil {
		t.Fatal(err)
	}
	target := u.Host
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u.Host = ln.Addr().String()
	q := u.Query()
	q.Set("sslmode", "disable") // the proxy reads the server's messages
	u.RawQuery = q.Encode()
	p := &cutAfterRow{url: u.String(), ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(s, c); _ = s.Close() }()
			go p.serverToClient(s, c)
		}
	}()
	t.Cleanup(p.close)
	return p
}

func (p *cutAfterRow) serverToClient(s, c net.Conn) {
	defer func() { _ = c.Close(); _ = s.Close() }()
	r := bufio.NewReader(s)
	for {
		head := make([]byte, 5)
		if _, err := io.ReadFull(r, head); err != nil {
			return
		}
		body := make([]byte, int(binary.BigEndian.Uint32(head[1:]))-4)
		if _, err := io.ReadFull(r, body); err != nil {
			return
		}
		if _, err := c.Write(append(head, body...)); err != nil {
			return
		}
		if head[0] == 'D' && !bytes.Equal(body, jitOffRow) && p.armed.CompareAndSwap(true, false) {
			p.cut.Add(1)
			return
		}
	}
}

func (p *cutAfterRow) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
}

// A claim whose fence did not hold is refused by its fence (a
// *processor.FencedError naming the partition that moved) once its first
// row says so, whatever becomes of the rest of the answer: here the
// connection is cut right after that row (a network, a pooler, a server
// gone while the answer's end is read and discarded). Nothing was written
// either way (the statement wrote nothing, and its transaction never
// committed), and the refusal is what the router must hear: it stops the
// zombie's partition, where a transient error retries the claim. pgx's
// own Query (the claim before 7eae5c2) broke off at that row and answered
// the fence's refusal.
func TestAFencedClaimIsRefusedByItsFenceWhenTheConnectionIsCutAfterItsFirstRow(t *testing.T) {
	url := pgtest.NewDatabase(t)
	ctx := deadline(t, time.Minute)
	if err := ledger.Migrate(ctx, url); err != nil {
		t.Fatal(err)
	}
	px := newCutAfterRow(t, url)
	pool, err := pgxpool.New(ctx, px.url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	l := ledger.NewFromPool(pool)
	p := processor.PartitionRef{Topic: "events", Partition: 1}
	epochs, err := l.Own(ctx, processor.Ownership{Group: "g", Member: "old", Parts: []processor.PartitionRef{p}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Own(ctx, processor.Ownership{Group: "g", Member: "new", Parts: []processor.PartitionRef{p}}); err != nil {
		t.Fatal(err)
	}
	a := intent("fenced-cut", "A")
	a.Fence = decide.Fence{Group: "g", Epoch: epochs[0]}
	px.armed.Store(true)
	_, err = l.Claim(ctx, []decide.Intent{a})
	if px.cut.Load() != 1 {
		t.Fatalf("the proxy cut %d connections, want the claim's", px.cut.Load())
	}
	fe, ok := processor.IsFenced(err)
	if !ok {
		t.Fatalf("a claim under the old epoch, its connection cut after its first row (held=false): %v (transient %v), want the fence's refusal", err, ledger.Transient(err))
	}
	if len(fe.Stale) != 1 || !fe.Has(p.Topic, p.Partition, a.Fence) {
		t.Errorf("the refusal names %+v, want partition %v at epoch %d", fe.Stale, p, a.Fence.Epoch)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM dedup_ledger WHERE workflow_id = $1`, a.WorkflowID).Scan(&n); err != nil || n != 0 {
		t.Errorf("%d rows written by the refused claim (%v), want none", n, err)
	}
}
