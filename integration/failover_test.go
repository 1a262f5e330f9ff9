package integration

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dedupio/dedup/internal/app"
	"github.com/dedupio/dedup/internal/config"
	"github.com/dedupio/dedup/internal/demo/workload"
	"github.com/dedupio/dedup/internal/testsupport/pgcluster"
	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/sink/ledger"
)

// The ledger's primary is killed with kill -9 under load and its standby
// promoted, with two routers on a multi-host URL
// (target_session_attrs=read-write). Synchronous: the promoted standby has
// every acknowledged row; the harness's routes, one of them
// allow_duplicate_failed_only, start without any setting, and each
// workflow ID's row is inserted once. Asynchronous, with the standby
// detached (lagging) before the kill: dedup refuses to start an allow_*
// route, or a ledger kept longer than Temporal's retention, without
// postgres.accept_async_replication; with it, the promoted standby lacks
// at least 150 acknowledged started rows, which are claimed again at
// generation 1 (after a replay of the whole topic). In both, no router
// exits, and every event has one workflow.
func TestLedgerFailoverUnderLoad(t *testing.T) {
	t.Run("synchronous", func(t *testing.T) { ledgerFailover(t, true) })
	t.Run("asynchronous with a lagging standby", func(t *testing.T) { ledgerFailover(t, false) })
}

// lostAtLeast is how many started rows the primary acknowledges after the
// asynchronous standby is detached, before it is killed: all of them are
// lost.
const lostAtLeast = 150

func ledgerFailover(t *testing.T, sync bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	e := newEnv(t, 4)
	began := time.Now()
	primary, err := pgcluster.Start(ctx, pgcluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = primary.Stop() })
	standby, err := primary.StartStandby(ctx, pgcluster.StandbyOptions{Synchronous: sync})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = standby.Stop() })
	if _, err := primary.CreateDatabase(ctx, "dedup"); err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/dedup?sslmode=disable&target_session_attrs=read-write", primary.Port(), standby.Port())
	if err := ledger.Migrate(ctx, url); err != nil {
		t.Fatal(err)
	}
	lc := ledger.DefaultConfig()
	lc.URL = url
	if e.led, err = ledger.Open(ctx, lc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.led.Close)
	e.dbURL = url

	cfg := e.config() // crm-sync: allow_duplicate_failed_only; postgres.retention 0 (forever)
	cfg.Kafka.MaxPollRecords = 100
	if sync {
		// Synchronous replication: nothing to accept.
		e.startRouter(cfg).stop(t)
	} else {
		// Each policy's outcome at start under asynchronous replication.
		refused := startupError(t, cfg)
		if !strings.HasPrefix(refused, "postgres.accept_async_replication: ") || !strings.Contains(refused, "routes[2] (id crm-sync, id_reuse_policy allow_duplicate_failed_only)") {
			t.Errorf("an allow_* route under asynchronous replication: %q, want a refusal naming routes[2] and postgres.accept_async_replication", refused)
		}
		reject := cfg
		reject.Routes = append(decide.Routes{}, cfg.Routes...)
		reject.Routes[2].IDReusePolicy = decide.ReuseRejectDuplicate
		if refused := startupError(t, reject); !strings.Contains(refused, "postgres.retention 0 keeps started rows forever") || strings.Contains(refused, "routes[") {
			t.Errorf("reject_duplicate routes, the ledger kept forever: %q, want a refusal naming postgres.retention only", refused)
		}
		// A ledger that forgets no later than Temporal (24h in the lab):
		// Temporal refuses whatever the ledger loses. The topics keep
		// records 7 days: the replay horizon is accepted here.
		reject.Postgres.Retention, reject.Postgres.AcceptShortHorizon = 24*time.Hour, true
		e.startRouter(reject).stop(t)
		cfg.Postgres.AcceptAsyncReplication = true
	}
	// Produced after the probes above, which start routers.
	w := workload.Generate(workload.Spec{Topic: e.topic, Partitions: 4, Records: 2000, DupRatio: 0.3, Seed: 38, IDPrefix: fmt.Sprintf("failover-%t-", sync)})
	want := expectedWorkflows(w)
	e.produce(w)

	r1, r2 := e.startRouter(cfg), e.startRouter(cfg)
	primaryConn, err := pgx.Connect(ctx, primary.DatabaseURL("dedup"))
	if err != nil {
		t.Fatal(err)
	}
	started := func() map[string]bool {
		t.Helper()
		rows, err := primaryConn.Query(ctx, `SELECT workflow_id FROM dedup_ledger WHERE state = 'started'`)
		if err != nil {
			t.Fatal(err)
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		out := make(map[string]bool, len(ids))
		for _, id := range ids {
			out[id] = true
		}
		return out
	}
	waitStarted := func(n int) map[string]bool {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if ids := started(); len(ids) >= n {
				return ids
			}
		}
		t.Fatalf("fewer than %d started rows after a minute", n)
		return nil
	}
	waitStarted(want / 4)
	var acked map[string]bool
	if sync {
		acked = waitStarted(want / 3)
	} else {
		if _, err := standby.Detach(ctx); err != nil {
			t.Fatal(err)
		}
		acked = waitStarted(len(started()) + lostAtLeast)
	}
	if len(acked) >= want {
		t.Fatalf("every row was started before the kill (%d): the failover is not under load", len(acked))
	}
	_ = primaryConn.Close(ctx)
	killed := time.Now()
	if err := primary.Kill(); err != nil {
		t.Fatal(err)
	}
	// What the standby has, read before it accepts writes (the routers
	// reach only a read-write server).
	if _, err := standby.CaughtUp(ctx); err != nil {
		t.Fatal(err)
	}
	kept := map[string]string{} // workflow ID -> state
	if err := readStandby(ctx, standby, func(id, state string) { kept[id] = state }); err != nil {
		t.Fatal(err)
	}
	// lost: started rows the primary acknowledged that the standby lacks
	// as started; gone: of these, the rows it lacks altogether (their
	// claim was lost too, not only their mark).
	var lost, gone []string
	for id := range acked {
		switch kept[id] {
		case "started":
		case "":
			gone = append(gone, id)
			fallthrough
		default:
			lost = append(lost, id)
		}
	}
	if err := standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: primary killed with %d started rows acknowledged and read; the standby, promoted %s later, has %d of them as started (%d lost: %d rows gone, %d back to pending)",
		time.Since(began).Round(time.Millisecond), len(acked), time.Since(killed).Round(time.Millisecond), len(acked)-len(lost), len(lost), len(gone), len(lost)-len(gone))
	switch {
	case sync && len(lost) != 0:
		t.Errorf("the synchronous standby lacks %d acknowledged started rows, e.g. %s", len(lost), lost[0])
	case !sync && len(lost) < lostAtLeast:
		t.Errorf("the detached standby lacks %d acknowledged started rows, want at least the %d started after it was detached", len(lost), lostAtLeast)
	}

	e.waitCommitted(2 * time.Minute)
	t.Logf("%s: every offset committed after the failover", time.Since(began).Round(time.Millisecond))
	routers := []*router{r1, r2}
	for _, r := range routers {
		select {
		case err := <-r.done:
			t.Fatalf("a router exited during the failover: %v", err)
		default:
		}
		r.stop(t)
	}
	if !sync {
		// The replay re-claims every event: a row lost, and not claimed
		// again by a redelivery or a re-send since, is claimed new again.
		e.resetToEarliest()
		r3, r4 := e.startRouter(cfg), e.startRouter(cfg)
		e.waitCommitted(2 * time.Minute)
		r3.stop(t)
		r4.stop(t)
		routers = append(routers, r3, r4)
		t.Logf("%s: replayed", time.Since(began).Round(time.Millisecond))
	}
	var newClaims, already float64
	for _, r := range routers {
		newClaims += counter(r.reg, "dedup_intents_total", "outcome", "new")
		already += counter(r.reg, "dedup_workflow_starts_total", "result", "already_started")
	}
	t.Logf("%v claims inserted a row for %d workflows; %v starts answered already started", newClaims, want, already)
	// Without a rewind each workflow ID's row is inserted once. Every row
	// a failover lost is inserted again, by a redelivery, a re-send or the
	// replay (pending rows lost too: at least the started ones); a row
	// back to pending is re-driven.
	switch {
	case sync && int(newClaims) != want:
		t.Errorf("%v rows inserted, want %d: the synchronous failover lost none", newClaims, want)
	case !sync && int(newClaims) < want+len(gone):
		t.Errorf("%v rows inserted, want at least %d + the %d gone", newClaims, want, len(gone))
	}
	// reject_duplicate: Temporal refuses the second start of a lost row's
	// event. allow_duplicate_failed_only (crm-sync, accepted): the lost
	// row is claimed again at generation 1, whose request ID is the run's:
	// Temporal answers with that run, while it keeps it.
	execs := e.checkExactlyOnce(w, want)
	t.Logf("after the failover and the replay: %d executions for %d workflows", execs, want)
	if !sync {
		crm := 0
		for _, id := range lost {
			if strings.HasPrefix(id, "activity-crm-sync:") {
				crm++
			}
		}
		var gen1 int
		if err := e.led.Pool().QueryRow(ctx, `SELECT count(*) FROM dedup_ledger WHERE workflow_id = ANY($1) AND generation = 1`, lost).Scan(&gen1); err != nil {
			t.Fatal(err)
		}
		t.Logf("lost rows: %d, %d of them of the allow_duplicate_failed_only route; %d claimed again at generation 1", len(lost), crm, gen1)
		if gen1 != len(lost) {
			t.Errorf("%d of the %d lost rows are at generation 1 again, want all", gen1, len(lost))
		}
	}
}

// startupError runs a router with cfg and returns its start-up error; it
// fails the test if the router starts.
func startupError(t *testing.T, cfg config.Config) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- app.Run(ctx, cfg, app.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Ready: ready})
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("the router returned nil at start")
		}
		return err.Error()
	case <-ready:
		cancel()
		if err := <-done; err != nil {
			t.Logf("the router, stopped: %v", err)
		}
		t.Fatal("the router started")
	}
	return ""
}

// readStandby calls f with every row's workflow ID and state the standby has.
func readStandby(ctx context.Context, standby *pgcluster.Cluster, f func(id, state string)) error {
	conn, err := pgx.Connect(ctx, standby.DatabaseURL("dedup"))
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(ctx) }()
	rows, err := conn.Query(ctx, `SELECT workflow_id, state::text FROM dedup_ledger`)
	if err != nil {
		return err
	}
	var id, state string
	_, err = pgx.ForEachRow(rows, []any{&id, &state}, func() error { f(id, state); return nil })
	return err
}
