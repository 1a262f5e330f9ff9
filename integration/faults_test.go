package integration

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/grpc/codes"

	"github.com/dedupio/dedup/internal/config"
	"github.com/dedupio/dedup/internal/demo/workload"
	"github.com/dedupio/dedup/schemas"
)

// The fault-injection suite: Kafka, Temporal and PostgreSQL run in this
// process; routers run as `dedup run` processes, so that crashes and stalls
// are real signals. Every scenario produces a workload with duplicates
// (half before the routers start, half while the fault happens), injects
// its fault, lets the system recover, and then asserts from Temporal, the
// ledger and Kafka: every unique workflow ID started exactly once, nothing
// lost, the dead-letter topic holds exactly the bad records, and the
// committed offsets equal the end offsets.

// scenario is one fault.
type scenario struct {
	spec    workload.Spec
	routers int
	// bad records mixed into the stream, and the dead-letter reason each
	// must get.
	bad []badRecord
	// setup runs once the env's topics exist, before anything is produced.
	setup func(e *env)
	cfg   func(*config.Config)
	// fault runs once the routers are up and the second half of the
	// workload is being produced.
	fault func(s *run)
	// settle is how long to wait for committed == end.
	settle time.Duration
}

type badRecord struct {
	rec    *kgo.Record
	reason string
}

// run is a scenario in progress.
type run struct {
	t     *testing.T
	e     *env
	cfg   config.Config
	procs []*proc
	mu    sync.Mutex
}

func (s *run) spawn(extraEnv ...string) *proc {
	return s.spawnBin(dedupBin, extraEnv...)
}

func (s *run) spawnBin(bin string, extraEnv ...string) *proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.e.spawnBin(bin, fmt.Sprintf("router-%d", len(s.procs)+1), s.cfg, extraEnv...)
	s.procs = append(s.procs, p)
	return p
}

func (s *run) live() []*proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*proc
	for _, p := range s.procs {
		if p.running() {
			out = append(out, p)
		}
	}
	return out
}

// result is what a scenario reports.
type result struct {
	produced, unique, duplicates, workflows, executions int
	deadLetters                                         map[string]int
	startCalls                                          float64
	elapsed                                             time.Duration
}

func (r result) String() string {
	return fmt.Sprintf("produced=%d unique_events=%d duplicate_records=%d workflows_expected=%d executions=%d dead_lettered=%v start_calls(surviving routers)=%.0f elapsed=%s",
		r.produced, r.unique, r.duplicates, r.workflows, r.executions, r.deadLetters, r.startCalls, r.elapsed.Round(time.Millisecond))
}

func runScenario(t *testing.T, sc scenario) (*run, result) {
	e := newEnv(t, max(sc.spec.Partitions, 1))
	if sc.setup != nil {
		sc.setup(e)
	}
	sc.spec.Topic = e.topic
	if sc.spec.IDPrefix == "" {
		sc.spec.IDPrefix = e.name + "-"
	}
	w := workload.Generate(sc.spec)
	want := expectedWorkflows(w)
	recs := append([]*kgo.Record(nil), w.Records...)
	rng := rand.New(rand.NewPCG(sc.spec.Seed, 7))
	wantDLQ := map[string]int{}
	for _, b := range sc.bad {
		i := rng.IntN(len(recs) + 1)
		b.rec.Partition = int32(rng.IntN(max(sc.spec.Partitions, 1)))
		recs = append(recs[:i], append([]*kgo.Record{b.rec}, recs[i:]...)...)
		wantDLQ[b.reason]++
	}
	if w.Conflicts > 0 {
		wantDLQ["conflict"] += w.Conflicts
	}
	half := len(recs) / 2
	e.produce(&workload.Workload{Records: recs[:half]})

	cfg := e.config()
	cfg.Kafka.MaxPollRecords = 200
	cfg.Kafka.RevokeTimeout = 3 * time.Second
	cfg.Kafka.DrainTimeout = 10 * time.Second
	cfg.Temporal.StartTimeout = 2 * time.Second
	cfg.Log.Level = "error"
	if sc.cfg != nil {
		sc.cfg(&cfg)
	}
	s := &run{t: t, e: e, cfg: cfg}
	began := time.Now()
	for i := 0; i < max(sc.routers, 1); i++ {
		s.spawn()
	}
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		rest := recs[half:]
		for i := 0; i < len(rest); i += len(rest)/10 + 1 {
			e.produce(&workload.Workload{Records: rest[i:min(i+len(rest)/10+1, len(rest))]})
			time.Sleep(200 * time.Millisecond)
		}
	}()
	if sc.fault != nil {
		sc.fault(s)
	}
	<-produced
	if len(s.live()) == 0 {
		s.spawn() // the fault left no router: recovery is a restart
	}
	settle := sc.settle
	if settle == 0 {
		settle = 4 * time.Minute
	}
	e.waitCommitted(settle)
	res := result{produced: len(recs), unique: len(w.Unique), duplicates: w.Duplicates, workflows: want, elapsed: time.Since(began)}
	for _, p := range s.live() {
		res.startCalls += p.metric("dedup_workflow_starts_total", "", "") + p.metric("dedup_workflow_start_errors_total", "", "")
	}
	for _, p := range s.live() {
		p.stop(t)
	}
	res.executions = e.checkExactlyOnce(w, want)
	res.deadLetters = e.dlqReasons()
	if fmt.Sprint(res.deadLetters) != fmt.Sprint(wantDLQ) {
		t.Errorf("dead letters %v, want %v", res.deadLetters, wantDLQ)
	}
	if ok, state := e.committedAtEnd(); !ok {
		t.Errorf("committed offsets are not at the end after the routers stopped: %s", state)
	}
	t.Logf("SCENARIO %s: %s", t.Name(), res)
	return s, res
}

func baseSpec(seed uint64) workload.Spec {
	return workload.Spec{Partitions: 4, Records: 3000, DupRatio: 0.3, CrossPartition: 0.1, Seed: seed}
}

// 1. A router is killed (as by SIGKILL: exit without flushing anything)
// after its claims are committed and before it starts them.
func TestFaultKillAfterClaim(t *testing.T) {
	runScenario(t, scenario{spec: baseSpec(11), routers: 2, fault: func(s *run) {
		p := s.spawn("DEDUP_FAILPOINT=after-claim:2")
		if code := p.wait(t, 2*time.Minute); code != 137 {
			t.Fatalf("failpoint router exited %d, want 137", code)
		}
		s.spawn()
	}})
}

// 2. A router is killed after Temporal accepted a start and before the
// ledger mark and the offset commit.
func TestFaultKillAfterStart(t *testing.T) {
	runScenario(t, scenario{spec: baseSpec(12), routers: 1, fault: func(s *run) {
		p := s.spawn("DEDUP_FAILPOINT=after-start:150")
		if code := p.wait(t, 2*time.Minute); code != 137 {
			t.Fatalf("failpoint router exited %d, want 137", code)
		}
		s.spawn()
	}})
}

// 3. The start RPC times out after the server accepted it: the outcome is
// unknown to the router, which retries and gets "already started".
func TestFaultStartOutcomeUnknown(t *testing.T) {
	var late int
	runScenario(t, scenario{spec: baseSpec(13), routers: 2,
		cfg: func(c *config.Config) { c.Temporal.StartTimeout = 500 * time.Millisecond },
		fault: func(s *run) {
			_, before := faults.Counts()
			faults.AnswerLate(s.e.namespace, 40, 1500*time.Millisecond)
			eventually(time.Minute, func() bool { _, l := faults.Counts(); return l-before >= 40 })
			_, after := faults.Counts()
			late = after - before
		}})
	faults.Clear()
	if late < 40 {
		t.Fatalf("only %d starts were answered late", late)
	}
}

// 4. Partitions are revoked mid-batch: a second and third router join, and
// leave (one cleanly, one killed), during the run. While the second joins,
// Temporal holds every start past the router's start timeout, so that the
// first router's records cannot finish: it must have claims in flight
// (pending ledger rows) on every partition when the second one joins, give
// partitions up as revoked (not lost) with them still in flight, and the
// second must re-drive the claims it inherits (they were abandoned
// uncommitted at the revoke timeout, and redelivered).
func TestFaultRebalanceMidRun(t *testing.T) {
	var revoked, lost, redrives float64
	var inFlight int
	runScenario(t, scenario{spec: baseSpec(14), routers: 1, fault: func(s *run) {
		a := s.live()[0]
		time.Sleep(time.Second)
		// Every start from now on is answered after 3s, past the 2s start
		// timeout: no attempt succeeds until Clear (the server does start
		// the workflows: the retries after Clear are told so).
		faults.AnswerLate(s.e.namespace, 1<<30, 3*time.Second)
		defer faults.Clear()
		if !eventually(30*time.Second, func() bool { inFlight = s.e.pendingPartitions(); return inFlight == 4 }) {
			t.Fatalf("setup: the first router has pending claims on %d partitions, want 4", inFlight)
		}
		revokedBefore := a.metric("dedup_partitions_released_total", "how", "revoked")
		b := s.spawn()
		if !eventually(time.Minute, func() bool { return a.metric("dedup_partitions_released_total", "how", "revoked") > revokedBefore }) {
			t.Fatal("the second router joined, and the first had no partition revoked")
		}
		revoked = a.metric("dedup_partitions_released_total", "how", "revoked") - revokedBefore
		lost = a.metric("dedup_partitions_released_total", "how", "lost")
		// Still no start has succeeded: the revoked partitions' claims were
		// in flight through the revoke.
		if n := s.e.pendingPartitions(); n != 4 {
			t.Errorf("after the revoke, pending claims on %d partitions, want still 4 (did a start succeed?)", n)
		}
		eventually(30*time.Second, func() bool { redrives = b.metric("dedup_intents_total", "outcome", "redrive"); return redrives > 0 })
		faults.Clear()
		time.Sleep(1500 * time.Millisecond)
		c := s.spawn()
		time.Sleep(2 * time.Second)
		b.stop(t)
		time.Sleep(time.Second)
		c.signal(t, syscall.SIGKILL)
		c.wait(t, 30*time.Second)
	}})
	t.Logf("second router's join: the first had claims in flight on %d partitions, %v partitions revoked, %v lost; the second re-drove %v claims it inherited", inFlight, revoked, lost, redrives)
	if lost != 0 {
		t.Errorf("the first router lost %v partitions, want them revoked", lost)
	}
	if redrives == 0 {
		t.Error("the second router re-drove no claim: no record was in flight on the partitions revoked from the first")
	}
}

// pendingPartitions is how many partitions have pending ledger rows
// (claims whose start is not marked).
func (e *env) pendingPartitions() int {
	e.t.Helper()
	var n int
	if err := e.led.Pool().QueryRow(context.Background(),
		`SELECT count(DISTINCT kafka_partition) FROM dedup_ledger WHERE state = 'pending'`).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

// 5. A zombie: a router is stopped (SIGSTOP) past its session timeout, its
// partitions move on, then it continues (SIGCONT). It must learn that its
// partitions are lost, and its late commits must not win: committed
// offsets never go backwards.
//
// The stall starts in a group at rest (both routers own partitions) and
// lasts until the broker has dropped the zombie and the group is at rest
// again without it: a member stalled during a rebalance is waited for (up
// to the rebalance timeout, which kfake restarts on every JoinGroup), and
// one that wakes within it is told to rejoin, revoking rather than losing.
func TestFaultZombie(t *testing.T) {
	var regressions []string
	var lost, revoked, commitErrors, behind float64
	var stalled time.Duration
	spec := baseSpec(15)
	runScenario(t, scenario{spec: spec, routers: 2, fault: func(s *run) {
		stop := s.e.committedMonitor()
		time.Sleep(time.Second)
		// The zombie must own partitions: the router with committed
		// offsets for some (each owned partition exports one), in a group
		// at rest with both routers owning partitions.
		var z *proc
		var group string
		if !eventually(time.Minute, func() bool {
			var members []int
			group, members = s.e.groupState()
			if group != "Stable" || len(members) != 2 || slices.Contains(members, 0) {
				return false
			}
			for _, p := range s.live() {
				if p.metric("dedup_committed_offset", "", "") > 0 {
					z = p
					return true
				}
			}
			return false
		}) {
			t.Fatalf("setup: no stable group of two routers owning partitions with commits (group %s)", group)
		}
		errorsBefore := z.metric("dedup_offset_commits_total", "result", "error")
		revokedBefore := z.metric("dedup_partitions_released_total", "how", "revoked")
		z.signal(t, syscall.SIGSTOP)
		began := time.Now()
		// The broker drops the zombie after its session timeout, and the
		// other router takes every partition.
		var members []int
		if !eventually(s.cfg.Kafka.SessionTimeout+s.cfg.Kafka.RebalanceTimeout+time.Minute, func() bool {
			group, members = s.e.groupState()
			return group == "Stable" && len(members) == 1 && members[0] == spec.Partitions
		}) {
			z.signal(t, syscall.SIGCONT)
			t.Fatalf("the group did not settle without the stopped router: %s, partitions per member %v", group, members)
		}
		time.Sleep(time.Second)
		stalled = time.Since(began)
		// Every row the ledger has ended (started, dead_lettered) as the
		// zombie wakes: nothing the zombie still holds (a polled batch, a
		// claim or mark on its way) may change one (the ledger's fence).
		before := endedRows(t, s.e)
		z.signal(t, syscall.SIGCONT)
		// The zombie learns it was fenced (its heartbeat: unknown member)
		// and gives its partitions up as lost: nothing of them may be
		// committed by it any more.
		// (The count is checked below, after the stop: a busy machine may
		// take longer than ten seconds to wake it and run its heartbeat.)
		eventually(time.Minute, func() bool { return z.metric("dedup_partitions_released_total", "how", "lost") > 0 })
		time.Sleep(5 * time.Second)
		lost = z.metric("dedup_partitions_released_total", "how", "lost")
		revoked = z.metric("dedup_partitions_released_total", "how", "revoked") - revokedBefore
		commitErrors = z.metric("dedup_offset_commits_total", "result", "error") - errorsBefore
		behind = z.metric("dedup_offset_commits_total", "result", "behind")
		regressions = stop()
		after := endedRows(t, s.e)
		for id, row := range before {
			if after[id] != row {
				t.Errorf("row %s changed after the zombie woke: %s, then %s", id, row, after[id])
			}
		}
		t.Logf("zombie: %d ended rows unchanged after it woke", len(before))
	}})
	if lost <= 0 {
		t.Errorf("the zombie never reported its partitions lost (lost %v, revoked %v)", lost, revoked)
	}
	// Whether the zombie's commit ticker fires before its heartbeat learns
	// of the fencing is a race of two goroutines woken together: a commit
	// it sends is rejected by the broker (stale generation) and counted as
	// an error; the committed offsets never regress either way.
	t.Logf("zombie: stopped %s, %v partitions lost, %v revoked, %v commits rejected after it woke, %v held back behind the group's",
		stalled.Round(time.Millisecond), lost, revoked, commitErrors, behind)
	for _, r := range regressions {
		t.Errorf("committed offset regressed: %s", r)
	}
}

// endedRows reads every started or dead_lettered ledger row: state,
// attempts, generation, run and last update, by workflow ID.
func endedRows(t *testing.T, e *env) map[string]string {
	t.Helper()
	rows, err := e.led.Pool().Query(context.Background(), `SELECT workflow_id,
	concat_ws(' ', state, attempts, generation, coalesce(run_id, ''), updated_at) FROM dedup_ledger WHERE state <> 'pending'`)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for rows.Next() {
		var id, row string
		if err := rows.Scan(&id, &row); err != nil {
			t.Fatal(err)
		}
		out[id] = row
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// groupState is the env's group's state and how many partitions each member
// is assigned.
func (e *env) groupState() (string, []int) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	groups, err := e.adm.DescribeGroups(ctx, e.group)
	if err != nil {
		return err.Error(), nil
	}
	g, ok := groups[e.group]
	if !ok || g.Err != nil {
		return fmt.Sprintf("not described (%v)", g.Err), nil
	}
	var members []int
	for _, m := range g.Members {
		n := 0
		if c, ok := m.Assigned.AsConsumer(); ok {
			for _, t := range c.Topics {
				n += len(t.Partitions)
			}
		}
		members = append(members, n)
	}
	return g.State, members
}

// 6. PostgreSQL is stopped (pg_ctl stop -m immediate) mid-run and started
// again. Routers pause fetching, report not ready, and resume by themselves.
func TestFaultPostgresDown(t *testing.T) {
	if stack.Postgres == nil {
		t.Skip("DATABASE_URL given: the test cannot stop that server")
	}
	var notReady, paused bool
	runScenario(t, scenario{spec: baseSpec(16), routers: 2, fault: func(s *run) {
		time.Sleep(time.Second)
		if err := stack.Postgres.StopImmediate(); err != nil {
			t.Fatal(err)
		}
		p := s.live()[0]
		notReady = eventually(15*time.Second, func() bool { return p.ready() == 503 })
		paused = eventually(15*time.Second, func() bool { return p.metric("dedup_paused_partitions", "", "") > 0 })
		time.Sleep(3 * time.Second)
		if err := stack.Postgres.Restart(context.Background()); err != nil {
			t.Fatal(err)
		}
		if !eventually(time.Minute, func() bool { return p.ready() == 200 }) {
			t.Error("router not ready again a minute after PostgreSQL came back")
		}
	}})
	if !notReady || !paused {
		t.Errorf("during the outage: /readyz 503 seen=%v, paused partitions seen=%v", notReady, paused)
	}
}

// 7. Temporal refuses starts for a while: Unavailable, then
// ResourceExhausted (throttling). Nothing is dead-lettered; all is retried.
func TestFaultTemporalUnavailable(t *testing.T) {
	var refused int
	var notReady bool
	runScenario(t, scenario{spec: baseSpec(17), routers: 2, fault: func(s *run) {
		before, _ := faults.Counts()
		time.Sleep(500 * time.Millisecond)
		faults.Refuse(s.e.namespace, codes.Unavailable, 4*time.Second)
		notReady = eventually(4*time.Second, func() bool { return s.live()[0].ready() == 503 })
		time.Sleep(4 * time.Second)
		faults.Refuse(s.e.namespace, codes.ResourceExhausted, 4*time.Second)
		time.Sleep(4 * time.Second)
		after, _ := faults.Counts()
		refused = after - before
	}})
	faults.Clear()
	if refused == 0 {
		t.Fatal("no start was refused: the fault did not apply")
	}
	if !notReady {
		t.Error("router stayed ready while Temporal refused every start")
	}
	t.Logf("%d starts refused", refused)
}

// poison returns records that can never be processed, with the reason
// each must be dead-lettered for.
func poison() []badRecord {
	raw := func(v string, hs ...string) *kgo.Record {
		r := &kgo.Record{Key: []byte("poison"), Value: []byte(v)}
		for i := 0; i+1 < len(hs); i += 2 {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: hs[i], Value: []byte(hs[i+1])})
		}
		return r
	}
	return []badRecord{
		{raw("\x00\x01\x02garbage\xff"), "undecodable"},
		{raw(`[1,2,3]`), "undecodable"},
		{raw(`{"type":"order.created","id":"x"`), "undecodable"}, // truncated
		{raw(`{"type":7,"id":"x"}`), "missing_type"},
		{raw(`{"id":"x","amount":3}`), "missing_type"},
		{raw(`{"a":1}`, "ce_specversion", "1.0", "ce_id", "x"), "missing_type"},
		{raw(`{"id":{"nested":true},"type":"order.created"}`), "invalid_id"},
		{raw(`{"id":"","type":"order.created"}`), "invalid_id"},
		{raw(`{"type":"order.created"}`, "idempotency-key", "bad\nid"), "invalid_id"},
		// Declared JSON and not JSON (binary-mode data of another type, or
		// of none that is not JSON, is bytes: issue #15).
		{raw(`not json`, "ce_specversion", "1.0", "ce_id", "x", "ce_type", "order.created", "content-type", "application/json"), "undecodable"},
	}
}

// 8. Poison records (garbage bytes, wrong JSON types) among good ones.
func TestFaultPoisonRecords(t *testing.T) {
	bad := poison()
	bad = append(bad, poison()...)
	runScenario(t, scenario{spec: baseSpec(18), routers: 2, bad: bad})
}

// 9. Oversized records (over max_value_bytes, 16 KiB): dead-lettered whole
// when the dead-letter topic takes them, and without their value, the
// header dedup-value-dropped giving its size, when it would not. The
// dead-letter topic takes at most 40 KiB (max.message.bytes, of a
// compressed batch; the padding is random, so compresses little): the 20
// and 36 KiB records go whole; the broker refuses the 64 KiB one; the 100
// and 300 KiB ones are over the router's own producer limit
// (max_value_bytes + 64 KiB, uncompressed) and refused before they reach
// the broker. The three records that may go whole or be refused by the
// broker have keys that put their dead letters on three different
// partitions: a refusal is of a whole batch, and none may share one.
func TestFaultOversized(t *testing.T) {
	const dlqMax = 40 << 10
	sizes := []int{20 << 10, 36 << 10, 64 << 10, 100 << 10, 300 << 10}
	rng := rand.New(rand.NewPCG(19, 19))
	dlqPart := kgo.StickyKeyPartitioner(nil).ForTopic("")
	used := map[int]bool{}
	var bad []badRecord
	for _, n := range sizes {
		key := ""
		if n > 16<<10+64<<10 {
			key = fmt.Sprintf("big-%d", n) // never in a batch
		}
		for i := 0; key == ""; i++ {
			k := fmt.Sprintf("big-%d-%d", n, i)
			if p := dlqPart.Partition(&kgo.Record{Key: []byte(k)}, 4); !used[p] {
				used[p], key = true, k
			}
		}
		pad := make([]byte, n*3/4)
		for i := range pad {
			pad[i] = byte(rng.Uint32())
		}
		v := `{"id":"` + key + `","type":"order.created","pad":"` + base64.StdEncoding.EncodeToString(pad) + `"}`
		bad = append(bad, badRecord{&kgo.Record{Key: []byte(key), Value: []byte(v)}, "oversized"})
	}
	s, _ := runScenario(t, scenario{spec: baseSpec(19), routers: 2, bad: bad,
		setup: func(e *env) {
			resp, err := e.adm.AlterTopicConfigs(context.Background(),
				[]kadm.AlterConfig{{Name: "max.message.bytes", Value: kadm.StringPtr(fmt.Sprint(dlqMax))}}, e.topic+".dlq")
			if err == nil {
				err = resp[0].Err
			}
			if err != nil {
				t.Fatalf("setting the dead-letter topic's max.message.bytes: %v", err)
			}
		},
		cfg: func(c *config.Config) { c.Kafka.MaxValueBytes = 16 << 10 }})
	dead := map[string]*kgo.Record{}
	for _, d := range s.e.deadLetters() {
		dead[string(d.Key)] = d
	}
	for i, b := range bad {
		d := dead[string(b.rec.Key)]
		if d == nil {
			t.Errorf("%d bytes: no dead letter", sizes[i])
			continue
		}
		if got, want := fmt.Sprintf("%s p%s@%s", header(d, schemas.HeaderDLQReason), header(d, schemas.HeaderDLQPartition), header(d, schemas.HeaderDLQOffset)),
			fmt.Sprintf("oversized p%d@%d", b.rec.Partition, b.rec.Offset); got != want {
			t.Errorf("%d bytes: dead letter %s, want %s", sizes[i], got, want)
		}
		dropped := header(d, schemas.HeaderDLQValueDropped)
		if sizes[i] < dlqMax {
			if dropped != "" || !bytes.Equal(d.Value, b.rec.Value) {
				t.Errorf("%d bytes: dead letter of %d bytes, %s=%q, want it whole and no such header", sizes[i], len(d.Value), schemas.HeaderDLQValueDropped, dropped)
			}
		} else if len(d.Value) != 0 || dropped != fmt.Sprint(len(b.rec.Value)) {
			t.Errorf("%d bytes: dead letter of %d bytes, %s=%q, want no value and %q", sizes[i], len(d.Value), schemas.HeaderDLQValueDropped, dropped, fmt.Sprint(len(b.rec.Value)))
		}
	}
}

// 10. The same ID with a different payload: never started, dead-lettered,
// recorded in dedup_conflicts.
func TestFaultConflicts(t *testing.T) {
	spec := baseSpec(20)
	spec.Conflicts = 30
	runScenario(t, scenario{spec: spec, routers: 2})
}

// 11. After a full run, the group's offsets are reset to the earliest: a
// second full pass starts nothing.
func TestFaultResetToEarliest(t *testing.T) {
	s, res := runScenario(t, scenario{spec: baseSpec(21), routers: 2})
	e := s.e
	e.resetToEarliest()
	a, b := s.spawn(), s.spawn()
	e.waitCommitted(3 * time.Minute)
	calls := 0.0
	dups := 0.0
	for _, p := range []*proc{a, b} {
		calls += p.metric("dedup_workflow_starts_total", "", "") + p.metric("dedup_workflow_start_errors_total", "", "")
		dups += p.metric("dedup_intents_total", "outcome", "duplicate")
	}
	a.stop(t)
	b.stop(t)
	_, total := e.listExecutions()
	t.Logf("replay after reset: %v duplicate intents skipped, %v Temporal calls, %d executions (was %d)", dups, calls, total, res.executions)
	if calls != 0 || total != res.executions {
		t.Errorf("reset replay made %v Temporal calls and left %d executions, want 0 and %d", calls, total, res.executions)
	}
}

// 12. Broker connection churn: for a while, one request in ten has its
// connection closed by the broker.
// A full broker restart: the only broker stops (connections refused)
// while half the workload is still being produced, and comes back 3
// seconds later on the same port with its data (log, committed offsets,
// groups). The routers ride it out: nothing lost, nothing doubled.
func TestFaultBrokerRestart(t *testing.T) {
	runScenario(t, scenario{spec: baseSpec(23), routers: 2, fault: func(s *run) {
		time.Sleep(time.Second)
		if err := stack.RestartKafka(3 * time.Second); err != nil {
			t.Fatal(err)
		}
		for _, p := range s.live() {
			if !eventually(time.Minute, func() bool { return p.ready() == 200 }) {
				t.Errorf("%s not ready a minute after the broker came back", p.name)
			}
		}
	}})
}

func TestFaultBrokerChurn(t *testing.T) {
	var dropped int
	var mu sync.Mutex
	runScenario(t, scenario{spec: baseSpec(22), routers: 2, fault: func(s *run) {
		until := time.Now().Add(6 * time.Second)
		rng := rand.New(rand.NewPCG(22, 22))
		stack.Kafka.Control(func(kmsg.Request) (kmsg.Response, error, bool) {
			stack.Kafka.KeepControl()
			mu.Lock()
			defer mu.Unlock()
			if time.Now().After(until) || rng.IntN(10) != 0 {
				return nil, nil, false
			}
			dropped++
			return nil, fmt.Errorf("injected connection drop"), true
		})
		time.Sleep(time.Until(until))
	}})
	mu.Lock()
	defer mu.Unlock()
	if dropped == 0 {
		t.Fatal("no connection was dropped")
	}
	t.Logf("%d connections dropped", dropped)
}

// 13. The soak: random SIGKILLs of router processes during 100,000 events
// with 30% duplicates. Long; runs when DEDUP_SOAK=1.
func TestFaultSoak(t *testing.T) {
	if os.Getenv("DEDUP_SOAK") == "" {
		t.Skip("set DEDUP_SOAK=1 to run the 100,000-event soak")
	}
	kills := 0
	runScenario(t, scenario{spec: workload.Spec{Partitions: 8, Records: 100000, DupRatio: 0.3, CrossPartition: 0.1, Conflicts: 50, Seed: 23},
		routers: 3, settle: 20 * time.Minute, fault: func(s *run) {
			rng := rand.New(rand.NewPCG(23, 23))
			for end := time.Now().Add(90 * time.Second); time.Now().Before(end); {
				time.Sleep(time.Duration(2000+rng.IntN(4000)) * time.Millisecond)
				live := s.live()
				if len(live) == 0 {
					continue
				}
				live[rng.IntN(len(live))].signal(t, syscall.SIGKILL)
				kills++
				s.spawn()
			}
		}})
	t.Logf("%d routers killed", kills)
}
