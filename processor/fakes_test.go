package processor

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/dedupio/dedup/processor/decide"
)

// In-memory stand-ins for the router's dependencies. They behave like the
// real ones (sink/ledger and Temporal under reject_duplicate), keep what
// happened for the assertions, and can be told to fail: they are fakes,
// not scripted mocks.

// errTransient is what the fakes return when told to fail transiently.
var errTransient = errors.New("fake: transient failure")

// failer makes an operation fail: n more times (n < 0: until cleared),
// with err.
type failer struct {
	n   int
	err error
}

// next reports the error the next call returns, consuming one failure.
func (f *failer) next() error {
	if f.n == 0 {
		return nil
	}
	if f.n > 0 {
		f.n--
	}
	return f.err
}

// Ledger row states: the router tests' short names of LedgerState's.
const (
	statePending      = decide.LedgerPending
	stateStarted      = decide.LedgerStarted
	stateDeadLettered = decide.LedgerDeadLettered
)

type ledgerRow struct {
	state      decide.LedgerState
	hash       [32]byte
	runID      string
	generation int
}

// fakeLedger is the claim ledger in memory, with the ledgers' verdict
// rule (ClaimVerdict): per workflow ID, a copy with another payload than
// the row's is a conflict; every other copy gets the row's verdict (new if
// this claim inserted it, redrive while pending, duplicate once started);
// an absent ID is claimed with its first copy's payload; a dead_lettered
// row is re-claimed by a copy with its payload.
type fakeLedger struct {
	mu        sync.Mutex
	rows      map[string]*ledgerRow
	claims    [][]decide.Intent // every successful Claim call's intents, in order
	calls     map[string]int
	claimFail failer
	markFail  failer
	deadFail  failer // MarkDeadLettered only
	// epochs is the fence: each partition's epoch, bumped by Own, and
	// the group generation that bumped it last.
	epochs map[PartitionEpoch]int64 // key: group, topic, partition (Epoch 0)
	gens   map[PartitionEpoch]int32
	// gate, if set, runs before each Claim, outside the lock; when it
	// returns true the claim was in flight at the server already (as a
	// statement sent before its context ended): it lands whatever the
	// context says.
	gate func(intents []decide.Intent) bool
	// afterClaim, if set, runs after each successful Claim, outside the
	// lock, before the verdicts reach the router (a claimer descheduled
	// between the ledger's answer and its dispatch).
	afterClaim func(intents []decide.Intent)
	// ownGate, if set, runs before each Own, outside the lock (a bump
	// held up on its way to the server: a retry's backoff, a slow pool).
	ownGate func(member string, parts []PartitionRef)
	// ownCtxGate, if set, runs before each Own like ownGate, with the
	// Own's ctx (a statement that ends when its ctx does).
	ownCtxGate func(ctx context.Context, member string, parts []PartitionRef)
	// markGate, if set, runs before each MarkStarted and MarkDeadLettered,
	// outside the lock (adversary: a ghost's Own landing just before a mark).
	markGate func(partitions []int32)
}

func ownerKey(group, topic string, partition int32) PartitionEpoch {
	return PartitionEpoch{Group: group, Topic: topic, Partition: partition}
}

// stale returns the fences of the writes that no longer hold, as the
// ledger names them (under l.mu).
func (l *fakeLedger) stale(n int, at func(i int) (string, int32, decide.Fence)) *FencedError {
	var e FencedError
	seen := map[PartitionEpoch]bool{}
	for i := 0; i < n; i++ {
		topic, part, f := at(i)
		pe := PartitionEpoch{Group: f.Group, Topic: topic, Partition: part, Epoch: f.Epoch}
		if !f.Fenced() || seen[pe] || l.epochs[ownerKey(f.Group, topic, part)] == f.Epoch {
			continue
		}
		seen[pe] = true
		e.Stale = append(e.Stale, pe)
	}
	if len(e.Stale) == 0 {
		return nil
	}
	return &e
}

func (l *fakeLedger) Own(ctx context.Context, o Ownership) ([]int64, error) {
	group, member, parts := o.Group, o.Member, o.Parts
	l.mu.Lock()
	gate, ctxGate := l.ownGate, l.ownCtxGate
	l.mu.Unlock()
	if gate != nil {
		gate(member, parts)
	}
	if ctxGate != nil {
		ctxGate(ctx, member, parts)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls["Own"]++
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := make([]int64, len(parts))
	for i, p := range parts {
		k := ownerKey(group, p.Topic, p.Partition)
		if g, ok := l.gens[k]; ok && g > o.Generation && !o.Confirmed {
			continue // a later generation holds it
		}
		l.epochs[k]++
		l.gens[k] = o.Generation
		out[i] = l.epochs[k]
	}
	return out, nil
}

// failMarkDeadLettered makes the next n MarkDeadLettered calls (n < 0: all,
// until called again with 0) fail with err.
func (l *fakeLedger) failMarkDeadLettered(n int, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.deadFail = failer{n: n, err: err}
}

func newFakeLedger() *fakeLedger {
	return &fakeLedger{rows: map[string]*ledgerRow{}, calls: map[string]int{}, epochs: map[PartitionEpoch]int64{}, gens: map[PartitionEpoch]int32{}}
}

// seed puts a row in the ledger, as a previous run would have left it.
func (l *fakeLedger) seed(wid string, state decide.LedgerState, hash [32]byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rows[wid] = &ledgerRow{state: state, hash: hash, generation: 1}
}

// purge deletes wid's row, as sink/ledger's Purge does to a started or
// dead_lettered row that ended longer ago than the retention.
func (l *fakeLedger) purge(wid string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.rows, wid)
}

// failClaims makes the next n claims (n < 0: all, until called again with
// 0) fail with err.
func (l *fakeLedger) failClaims(n int, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.claimFail = failer{n: n, err: err}
}

// row returns wid's recorded run and generation.
func (l *fakeLedger) row(wid string) (runID string, generation int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r := l.rows[wid]; r != nil {
		return r.runID, r.generation
	}
	return "", 0
}

func (l *fakeLedger) state(wid string) decide.LedgerState {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r := l.rows[wid]; r != nil {
		return r.state
	}
	return ""
}

func (l *fakeLedger) callCount(name string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.calls[name]
}

func (l *fakeLedger) claimLog() [][]decide.Intent {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([][]decide.Intent(nil), l.claims...)
}

func (l *fakeLedger) Claim(ctx context.Context, intents []decide.Intent) ([]decide.Claimed, error) {
	out, err := l.claim(ctx, intents)
	l.mu.Lock()
	after := l.afterClaim
	l.mu.Unlock()
	if after != nil && err == nil {
		after(intents)
	}
	return out, err
}

// setAfterClaim sets afterClaim.
func (l *fakeLedger) setAfterClaim(f func(intents []decide.Intent)) {
	l.mu.Lock()
	l.afterClaim = f
	l.mu.Unlock()
}

func (l *fakeLedger) claim(ctx context.Context, intents []decide.Intent) ([]decide.Claimed, error) {
	l.mu.Lock()
	gate := l.gate
	l.mu.Unlock()
	if gate != nil && gate(intents) {
		ctx = context.WithoutCancel(ctx)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls["Claim"]++
	if err := l.claimFail.next(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if e := l.stale(len(intents), func(i int) (string, int32, decide.Fence) {
		return intents[i].Topic, intents[i].Partition, intents[i].Fence
	}); e != nil {
		return nil, e
	}
	inserted := map[string]bool{}
	for _, in := range intents {
		if l.rows[in.WorkflowID] == nil {
			l.rows[in.WorkflowID] = &ledgerRow{state: statePending, hash: in.PayloadHash, generation: 1}
			inserted[in.WorkflowID] = true
		}
	}
	out := make([]decide.Claimed, len(intents))
	for i, in := range intents {
		row := l.rows[in.WorkflowID]
		var reclaims bool
		out[i], reclaims = decide.ClaimVerdict(row.state, row.hash == in.PayloadHash, inserted[in.WorkflowID], row.generation)
		if reclaims {
			row.state = decide.LedgerPending
		}
	}
	l.claims = append(l.claims, append([]decide.Intent(nil), intents...))
	return out, nil
}

func (l *fakeLedger) MarkStarted(ctx context.Context, started []Started) error {
	l.mu.Lock()
	mg := l.markGate
	l.mu.Unlock()
	if mg != nil {
		ps := make([]int32, len(started))
		for i, s := range started {
			ps[i] = s.Partition
		}
		mg(ps)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls["MarkStarted"]++
	for i := range started {
		started[i].Recorded = false
	}
	if err := l.markFail.next(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil { // as pgx does
		return err
	}
	e := l.stale(len(started), func(i int) (string, int32, decide.Fence) {
		return started[i].Topic, started[i].Partition, started[i].Fence
	})
	for i, s := range started {
		if e != nil && e.Has(s.Topic, s.Partition, s.Fence) {
			continue
		}
		r := l.rows[s.WorkflowID]
		if r != nil && (r.state == statePending || r.state == stateStarted && r.generation < s.Generation) {
			r.state, r.runID, r.generation = stateStarted, s.RunID, max(r.generation, s.Generation)
		}
		started[i].Recorded = r != nil && r.state == stateStarted && r.generation >= s.Generation
	}
	if e != nil {
		return e
	}
	return nil
}

func (l *fakeLedger) MarkDeadLettered(ctx context.Context, rows []DeadLettered) error {
	l.mu.Lock()
	mg := l.markGate
	l.mu.Unlock()
	if mg != nil {
		ps := make([]int32, len(rows))
		for i, d := range rows {
			ps[i] = d.Partition
		}
		mg(ps)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls["MarkDeadLettered"]++
	if err := l.markFail.next(); err != nil {
		return err
	}
	if err := l.deadFail.next(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil { // as pgx does
		return err
	}
	e := l.stale(len(rows), func(i int) (string, int32, decide.Fence) { return rows[i].Topic, rows[i].Partition, rows[i].Fence })
	for _, d := range rows {
		if e != nil && e.Has(d.Topic, d.Partition, d.Fence) {
			continue
		}
		if r := l.rows[d.WorkflowID]; r != nil && r.state == statePending {
			r.state = stateDeadLettered
		}
	}
	if e != nil {
		return e
	}
	return nil
}

// fakeDeadLetterLog is the dead-letter log in memory: entries keyed by
// record coordinates and workflow, as in sink/ledger.
type fakeDeadLetterLog struct {
	mu      sync.Mutex
	entries map[dlKey]DeadLetter
	order   []DeadLetter // every recorded entry, in order, once
	calls   map[string]int
	fail    failer // Written and Record
	recFail failer // Record only
}

type dlKey struct {
	topic     string
	partition int32
	offset    int64
	workflow  string
}

func keyOf(d DeadLetter) dlKey { return dlKey{d.Topic, d.Partition, d.Offset, d.WorkflowID} }

func newFakeDeadLetterLog() *fakeDeadLetterLog {
	return &fakeDeadLetterLog{entries: map[dlKey]DeadLetter{}, calls: map[string]int{}}
}

// failAll makes Written and Record fail with err, n more times (n < 0:
// until called again with 0).
func (d *fakeDeadLetterLog) failAll(n int, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.fail = failer{n: n, err: err}
}

// failRecord makes Record alone fail with err, n more times (n < 0: until
// called again with 0): the dead letter is produced, its log entry is not.
func (d *fakeDeadLetterLog) failRecord(n int, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.recFail = failer{n: n, err: err}
}

func (d *fakeDeadLetterLog) Written(ctx context.Context, dls []DeadLetter) ([]bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls["Written"]++
	if err := d.fail.next(); err != nil {
		return nil, err
	}
	out := make([]bool, len(dls))
	for i, dl := range dls {
		_, out[i] = d.entries[keyOf(dl)]
	}
	return out, nil
}

func (d *fakeDeadLetterLog) Record(ctx context.Context, dls []DeadLetter) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls["Record"]++
	if err := d.fail.next(); err != nil {
		return err
	}
	if err := d.recFail.next(); err != nil {
		return err
	}
	for _, dl := range dls {
		if _, ok := d.entries[keyOf(dl)]; !ok {
			d.entries[keyOf(dl)] = dl
			d.order = append(d.order, dl)
		}
	}
	return nil
}

func (d *fakeDeadLetterLog) callCount(name string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.calls[name]
}

// recorded returns the recorded dead letters, in order.
func (d *fakeDeadLetterLog) recorded() []DeadLetter {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]DeadLetter(nil), d.order...)
}

// byReason counts recorded dead letters per reason.
func (d *fakeDeadLetterLog) byReason() map[string]int {
	out := map[string]int{}
	for _, dl := range d.recorded() {
		out[dl.Reason]++
	}
	return out
}

// execution is one workflow run in the fake Temporal.
type execution struct {
	runID     string
	req       decide.StartRequest
	by        string // which router started it
	failed    bool   // closed as failed (fail)
	completed bool   // closed as completed (complete)
	// signals are the signals the run received, in order (an entity
	// workflow's, started or signalled by SignalWithStart), and
	// signalIDs the request IDs it recorded with them (Temporal's
	// SignalRequestedIds: per run).
	signals   []decide.SignalRequest
	signalIDs map[string]bool
}

func (x execution) closed() bool { return x.failed || x.completed }

// fakeStarter is Temporal as sink/starter drives it, with the server's
// rules for a workflow ID that has runs: a start whose request ID (its
// generation) made the current run returns that run; otherwise an open
// current run answers already-started, and a closed one is followed by a
// new run only if the start's reuse policy allows it (allow_duplicate:
// any close; allow_duplicate_failed_only: failed; reject_duplicate:
// never). Runs close only when the test says (fail, complete). It counts
// every Start call, can hold the starts of a workflow ID until released,
// fail them transiently n times, create the run and lose the answer
// (loseAnswer), or refuse them for good (Permanent).
type fakeStarter struct {
	mu         sync.Mutex
	executions map[string][]execution
	calls      map[string]int      // Start calls per workflow ID
	lastRuns   map[string]int      // LastRun calls per workflow ID
	callers    map[string][]string // who called, per workflow ID, in order
	waiting    map[string]int      // calls currently held
	blocked    map[string]chan struct{}
	transient  map[string]int
	lost       map[string]int // starts whose run is created and whose answer is lost
	permanent  map[string]error
	nextRun    int
	sws        []decide.StartRequest // SignalWithStart calls
}

func newFakeStarter() *fakeStarter {
	s := &fakeStarter{executions: map[string][]execution{}, calls: map[string]int{}, lastRuns: map[string]int{}, callers: map[string][]string{},
		waiting: map[string]int{}, blocked: map[string]chan struct{}{}, transient: map[string]int{}, lost: map[string]int{},
		permanent: map[string]error{}}
	return s
}

// as is the starter as one router sees it: calls are recorded with name.
func (s *fakeStarter) as(name string) Starter { return namedStarter{s, name} }

type namedStarter struct {
	s    *fakeStarter
	name string
}

func (n namedStarter) Start(ctx context.Context, req decide.StartRequest) (StartResult, error) {
	return n.s.start(ctx, req, n.name)
}

func (n namedStarter) LastRun(ctx context.Context, ns, wid string) (decide.Run, error) {
	return n.s.LastRun(ctx, ns, wid)
}

// LastRun describes wid's latest run (one namespace: ns is not looked at).
func (s *fakeStarter) LastRun(ctx context.Context, _, wid string) (decide.Run, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastRuns[wid]++
	ex := s.executions[wid]
	if len(ex) == 0 {
		return decide.Run{}, Permanent(fmt.Errorf("fake temporal: no workflow %s", wid))
	}
	last := ex[len(ex)-1]
	return decide.Run{ID: last.runID, Closed: last.closed(), Failed: last.failed, Generation: max(last.req.Generation, 1)}, nil
}

// fail closes wid's latest run as failed.
func (s *fakeStarter) fail(wid string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ex := s.executions[wid]; len(ex) > 0 {
		ex[len(ex)-1].failed = true
	}
}

// complete closes wid's latest run as completed.
func (s *fakeStarter) complete(wid string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ex := s.executions[wid]; len(ex) > 0 {
		ex[len(ex)-1].completed = true
	}
}

// loseAnswer makes the next n starts of wid that create a run lose their
// answer: the run exists, the caller gets a transient error.
func (s *fakeStarter) loseAnswer(wid string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lost[wid] = n
}

// lastRunCount is how many times LastRun was asked about wid.
func (s *fakeStarter) lastRunCount(wid string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastRuns[wid]
}

func (s *fakeStarter) Start(ctx context.Context, req decide.StartRequest) (StartResult, error) {
	return s.start(ctx, req, "")
}

// block holds every start of wid until release (or the caller's context
// ends, in which case that start does not happen).
func (s *fakeStarter) block(wid string) (release func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := make(chan struct{})
	s.blocked[wid] = ch
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.blocked[wid] == ch {
				delete(s.blocked, wid)
			}
			close(ch)
		})
	}
}

// failTransient makes the next n starts of wid fail with a retryable error.
func (s *fakeStarter) failTransient(wid string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.transient[wid] = n
}

// failPermanent makes every start of wid fail with a Permanent error.
func (s *fakeStarter) failPermanent(wid string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.permanent[wid] = Permanent(fmt.Errorf("fake temporal: bad request for %s", wid))
}

// allowStarts lifts failPermanent: Temporal takes wid's starts again (an
// entity reopened, a namespace restored).
func (s *fakeStarter) allowStarts(wid string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.permanent, wid)
}

// swsCalls are every SignalWithStart call, in order (retries and
// re-drives included).
func (s *fakeStarter) swsCalls() []decide.StartRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]decide.StartRequest(nil), s.sws...)
}

// signalsOf returns the event IDs every run of entity received, run by
// run, in order.
func (s *fakeStarter) signalsOf(entity string) [][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out [][]string
	for _, x := range s.executions[entity] {
		var ids []string
		for _, sg := range x.signals {
			ids = append(ids, sg.Input.EventID)
		}
		out = append(out, ids)
	}
	return out
}

// continueAsNew closes entity's open run as continued-as-new and opens the
// next one, which, as in Temporal, starts with no signal request IDs.
func (s *fakeStarter) continueAsNew(entity string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ex := s.executions[entity]
	if len(ex) == 0 || ex[len(ex)-1].closed() {
		return
	}
	ex[len(ex)-1].completed = true
	s.nextRun++
	s.executions[entity] = append(ex, execution{runID: fmt.Sprintf("run-%d", s.nextRun), req: ex[len(ex)-1].req, by: "continue-as-new",
		signalIDs: map[string]bool{}})
}

// signalWithStart is SignalWithStartWorkflowExecution with Temporal's
// rules (server v1.32, docs/signals.md): an open run is signalled, unless
// it recorded the request ID already (then nothing happens, and the run is
// answered); no run, or a closed one the reuse policy lets be followed,
// gets a new run with the signal; a closed one the policy refuses is
// "already started", which the starter turns into success only when that
// run was started by this very request ID, else into a permanent error.
// The request ID is the delivery key (sink/starter hashes it into a UUID:
// equal keys, equal IDs). Called with s.mu held.
func (s *fakeStarter) signalWithStart(req decide.StartRequest, by string) (StartResult, error) {
	entity, rid := req.Signal.WorkflowID, req.WorkflowID
	s.sws = append(s.sws, req)
	ex := s.executions[entity]
	if len(ex) > 0 {
		last := &ex[len(ex)-1]
		switch {
		case !last.closed() && last.signalIDs[rid]:
			return StartResult{RunID: last.runID, AlreadyStarted: true}, nil
		case !last.closed():
			last.signals = append(last.signals, *req.Signal)
			last.signalIDs[rid] = true
			return StartResult{RunID: last.runID, AlreadyStarted: true}, nil
		}
		follow := req.ReusePolicy == decide.ReuseAllowDuplicate || req.ReusePolicy == decide.ReuseAllowDuplicateFailedOnly && last.failed
		if !follow {
			if last.req.WorkflowID == rid {
				return StartResult{RunID: last.runID, AlreadyStarted: true}, nil
			}
			return StartResult{}, Permanent(fmt.Errorf("fake temporal: workflow %s closed, policy %s", entity, req.ReusePolicy))
		}
	}
	s.nextRun++
	run := fmt.Sprintf("run-%d", s.nextRun)
	s.executions[entity] = append(ex, execution{runID: run, req: req, by: by, signals: []decide.SignalRequest{*req.Signal},
		signalIDs: map[string]bool{rid: true}})
	return StartResult{RunID: run}, nil
}

func (s *fakeStarter) start(ctx context.Context, req decide.StartRequest, by string) (StartResult, error) {
	wid := req.WorkflowID
	s.mu.Lock()
	s.calls[wid]++
	s.callers[wid] = append(s.callers[wid], by)
	if ch := s.blocked[wid]; ch != nil {
		s.waiting[wid]++
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
		}
		s.mu.Lock()
		s.waiting[wid]--
		if err := ctx.Err(); err != nil {
			s.mu.Unlock()
			return StartResult{}, err
		}
	}
	defer s.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return StartResult{}, err
	}
	if err := s.permanent[wid]; err != nil {
		return StartResult{}, err
	}
	if s.transient[wid] > 0 {
		s.transient[wid]--
		return StartResult{}, errTransient
	}
	if req.Signal != nil {
		res, err := s.signalWithStart(req, by)
		if err == nil && s.lost[wid] > 0 {
			s.lost[wid]--
			return StartResult{}, errTransient
		}
		return res, err
	}
	if ex := s.executions[wid]; len(ex) > 0 {
		// As Temporal does: only the current run's request ID is
		// matched, then an open run is already started, then the reuse
		// policy decides whether a closed one may be followed.
		last := ex[len(ex)-1]
		if max(last.req.Generation, 1) == max(req.Generation, 1) {
			return StartResult{RunID: last.runID, AlreadyStarted: true}, nil
		}
		follow := last.closed() && (req.ReusePolicy == decide.ReuseAllowDuplicate ||
			req.ReusePolicy == decide.ReuseAllowDuplicateFailedOnly && last.failed)
		if !follow {
			return StartResult{RunID: last.runID, AlreadyStarted: true}, nil
		}
	}
	s.nextRun++
	run := fmt.Sprintf("run-%d", s.nextRun)
	s.executions[wid] = append(s.executions[wid], execution{runID: run, req: req, by: by})
	if s.lost[wid] > 0 {
		s.lost[wid]--
		return StartResult{}, errTransient
	}
	return StartResult{RunID: run}, nil
}

// executionsOf returns wid's executions.
func (s *fakeStarter) executionsOf(wid string) []execution {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]execution(nil), s.executions[wid]...)
}

// executionCounts returns how many executions each workflow ID has.
func (s *fakeStarter) executionCounts() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for wid, ex := range s.executions {
		out[wid] = len(ex)
	}
	return out
}

func (s *fakeStarter) callCount(wid string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[wid]
}

func (s *fakeStarter) callersOf(wid string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.callers[wid]...)
}

// heldCount is how many starts of wid are being held right now.
func (s *fakeStarter) heldCount(wid string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.waiting[wid]
}

// NewFakeLedger is the fake ledger and a read of its rows, for the Ledger
// contract suite (contract_test.go, package processor_test, runs
// processor/ledgertest, which this package's own tests cannot import).
func NewFakeLedger() (Ledger, func(ctx context.Context, workflowID string) (decide.LedgerState, string, bool, error)) {
	l := newFakeLedger()
	return l, func(_ context.Context, wid string) (decide.LedgerState, string, bool, error) {
		l.mu.Lock()
		defer l.mu.Unlock()
		r := l.rows[wid]
		if r == nil {
			return "", "", false, nil
		}
		return r.state, r.runID, true, nil
	}
}
