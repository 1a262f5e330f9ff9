package processor

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/dedupio/dedup/connect/schemaregistry"
	"github.com/dedupio/dedup/internal/testsupport/srstandin"
	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/processor/srdecode"
)

func knownTestConfig() Config {
	cfg := DefaultConfig()
	cfg.Brokers = []string{"127.0.0.1:9092"}
	cfg.Group = "g"
	cfg.Topics = []string{testTopic}
	cfg.Routes = decide.Routes{{ID: testRoute, Match: decide.Match{Type: testType}, WorkflowType: "W", TaskQueue: "q"}}
	return cfg
}

// A record's digest changes with every byte the decision may read (topic,
// partition, offset, key, value, each header), tells a nil key, value or
// header value from an empty one and a header split otherwise, and changes
// with the print (the binary and the deciding configuration); not with
// the timestamp, which no decision reads.
func TestAKnownDigestChangesWithEveryByteADecisionMayRead(t *testing.T) {
	base := func() *kgo.Record {
		return &kgo.Record{Topic: "events", Partition: 1, Offset: 7, Timestamp: time.Unix(100, 5), Key: []byte("k"), Value: []byte(`{"id":"1"}`),
			Headers: []kgo.RecordHeader{{Key: "ce_id", Value: []byte("x")}, {Key: "h", Value: []byte("yz")}}}
	}
	var print, other [32]byte
	other[0] = 1
	ref := knownDigest(&print, base())
	if again := knownDigest(&print, base()); again != ref {
		t.Fatal("the same record digests two ways")
	}
	changes := map[string]func(r *kgo.Record){
		"topic":               func(r *kgo.Record) { r.Topic = "events2" },
		"partition":           func(r *kgo.Record) { r.Partition = 2 },
		"offset":              func(r *kgo.Record) { r.Offset = 8 },
		"nil key":             func(r *kgo.Record) { r.Key = nil },
		"empty key":           func(r *kgo.Record) { r.Key = []byte{} },
		"value":               func(r *kgo.Record) { r.Value = []byte(`{"id":"2"}`) },
		"nil value":           func(r *kgo.Record) { r.Value = nil },
		"header value":        func(r *kgo.Record) { r.Headers[1].Value = []byte("yy") },
		"nil header value":    func(r *kgo.Record) { r.Headers[0].Value = nil },
		"header split":        func(r *kgo.Record) { r.Headers[1] = kgo.RecordHeader{Key: "hy", Value: []byte("z")} },
		"header dropped":      func(r *kgo.Record) { r.Headers = r.Headers[:1] },
		"headers swapped":     func(r *kgo.Record) { r.Headers[0], r.Headers[1] = r.Headers[1], r.Headers[0] },
		"key moved to value":  func(r *kgo.Record) { r.Key, r.Value = nil, append([]byte("k"), r.Value...) },
		"topic bytes to key":  func(r *kgo.Record) { r.Topic, r.Key = "event", append([]byte("s"), r.Key...) },
		"header added, empty": func(r *kgo.Record) { r.Headers = append(r.Headers, kgo.RecordHeader{}) },
	}
	seen := map[[16]byte]string{ref: "base"}
	for name, change := range changes {
		r := base()
		change(r)
		d := knownDigest(&print, r)
		if prev, ok := seen[d]; ok {
			t.Errorf("%s: digest %x, as %s's", name, d, prev)
		}
		seen[d] = name
	}
	if knownDigest(&other, base()) == ref {
		t.Error("another print: the same digest")
	}
	later := base()
	later.Timestamp = later.Timestamp.Add(time.Hour)
	if knownDigest(&print, later) != ref {
		t.Error("another timestamp: another digest")
	}
}

// The print changes with the deciding configuration, and a router with a
// tenant keyring writes no record known (the keyring is read again when
// its file changes: the same bytes may be decided otherwise later).
func TestAKnownPrintChangesWithTheDecidingConfigurationAndATenantKeyringHasNone(t *testing.T) {
	cfg := knownTestConfig()
	a, err := knownPrint(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := knownPrint(cfg); err != nil || b != a {
		t.Fatalf("the same configuration printed two ways: %v", err)
	}
	changes := map[string]func(c *Config){
		"a route added": func(c *Config) {
			c.Routes = append(c.Routes, decide.Route{ID: "r2", Match: decide.Match{Type: testType}, WorkflowType: "W", TaskQueue: "q"})
		},
		"a route's task queue": func(c *Config) {
			c.Routes = decide.Routes{{ID: testRoute, Match: decide.Match{Type: testType}, WorkflowType: "W", TaskQueue: "q2"}}
		},
		"max_value_bytes":    func(c *Config) { c.MaxValueBytes = 1000 },
		"no_route":           func(c *Config) { c.NoRoute = "dead_letter" },
		"the event ID rules": func(c *Config) { c.EventID.Headers = []string{"ce_id"} },
	}
	for name, change := range changes {
		c := knownTestConfig()
		change(&c)
		b, err := knownPrint(c)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if b == a {
			t.Errorf("%s: the same print", name)
		}
	}
	c := knownTestConfig()
	c.TenantKeysFile = "/etc/dedup/tenants.yaml"
	if _, err := knownPrint(c); err == nil || !strings.Contains(err.Error(), "tenant keyring") {
		t.Errorf("a tenant keyring: %v, want an error naming it", err)
	}
}

// A record is written known only when no route of its decision may run
// again (an allow_* policy asks Temporal for each duplicate).
func TestARecordWithARouteThatMayRunAgainIsNeverWrittenKnown(t *testing.T) {
	r := &Router{known: &knownLedgerStub{}}
	reject := &decide.Route{ID: "a", IDReusePolicy: decide.ReuseRejectDuplicate}
	allow := &decide.Route{ID: "b", IDReusePolicy: decide.ReuseAllowDuplicate}
	signal := &decide.Route{ID: "c", Mode: decide.ModeSignal, IDReusePolicy: decide.ReuseAllowDuplicate}
	d := [16]byte{1}
	for _, c := range []struct {
		name   string
		routes []*decide.Route
		want   int32
	}{
		{"reject_duplicate", []*decide.Route{reject}, 1},
		{"reject_duplicate and a signal route", []*decide.Route{reject, signal}, 2},
		{"allow_duplicate", []*decide.Route{allow}, 0},
		{"reject_duplicate and allow_duplicate", []*decide.Route{reject, allow}, 0},
		{"no route", nil, 0},
	} {
		dec := &decide.Decision{Routes: c.routes, Intents: make([]decide.Intent, len(c.routes))}
		if got := r.knownOf(dec, d); got.Intents != c.want || (c.want > 0 && got.Digest != d) {
			t.Errorf("%s: %+v, want %d intents", c.name, got, c.want)
		}
	}
	if got := (&Router{}).knownOf(&decide.Decision{Routes: []*decide.Route{reject}, Intents: make([]decide.Intent, 1)}, d); got != (decide.Known{}) {
		t.Errorf("a router whose ledger knows no record: %+v", got)
	}
}

// knownLedgerStub is a KnownLedger for the tests of knownOf, which never
// call it.
type knownLedgerStub struct{ fakeLedger }

func (*knownLedgerStub) Replaying() bool { return false }
func (*knownLedgerStub) Known(context.Context, []KnownRecord, []int32) error {
	return errors.New("not called")
}

// blockingKnown is a KnownLedger whose ledger replays: its first read of
// known records waits until released; every read knows no record.
type blockingKnown struct {
	once             sync.Once
	entered, release chan struct{}
}

func (*blockingKnown) Replaying() bool { return true }

func (k *blockingKnown) Known(ctx context.Context, _ []KnownRecord, known []int32) error {
	first := false
	k.once.Do(func() { first = true; close(k.entered) })
	if first {
		select {
		case <-k.release:
		case <-ctx.Done():
		}
	}
	clear(known)
	return nil
}

// A poll taken down the known path is resolved (its Schema Registry
// schemas fetched) by the poll loop, but decided later, by the claimer
// (settle), after the poll loop went on resolving the next polls. A
// record the ledger does not know must be decided as it would have been
// right after its own poll's resolve: with its schema. Here the next
// poll names as many other schemas as the cache keeps (a cache of 64,
// boundedRegistry, in place of the default's 4096), so its resolve
// forgets the first poll's schema before the claimer decides the first
// poll: its record must still be delivered, not dead-lettered
// undecodable (a permanent verdict for a record whose schema exists).
func TestAKnownPathRecordIsDecidedWithTheSchemasItsPollResolved(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, 1, envOpt{})
	stand := srstandin.New()
	defer stand.Close()
	idA, _ := stand.Register("events-value", sr.Schema{Schema: orderAvro})
	const others = boundedSchemas
	otherIDs := make([]int, others)
	for i := range others {
		s := fmt.Sprintf(`{"type":"record","name":"Misc%d","namespace":"shop","fields":[{"name":"type","type":"string"}]}`, i)
		otherIDs[i], _ = stand.Register(fmt.Sprintf("misc%d-value", i), sr.Schema{Schema: s})
	}
	cfg := manySchemasConfig(t, e, stand.URL(), others)
	e.produceRaw(0, avroRecord(t, orderAvro, idA, map[string]any{"type": "order.placed", "order_id": "o-7", "amount": int64(1)}))

	kl := &blockingKnown{entered: make(chan struct{}), release: make(chan struct{})}
	released := false
	defer func() {
		if !released {
			close(kl.release)
		}
	}()
	bounded := boundedRegistry(t, cfg)
	e.startWith("r1", cfg, func(r *Router, _ *prometheus.Registry) { r.known, r.decider = kl, bounded })
	select {
	case <-kl.entered: // the first poll (the order) waits in the claimer, undecided
	case <-time.After(20 * time.Second):
		t.Fatal("the known path was never taken")
	}
	before := stand.Requests()
	recs := make([]*kgo.Record, others)
	for i, id := range otherIDs {
		recs[i] = &kgo.Record{Topic: testTopic, Partition: 0, Value: avroRecord(t,
			fmt.Sprintf(`{"type":"record","name":"Misc%d","namespace":"shop","fields":[{"name":"type","type":"string"}]}`, i), id,
			map[string]any{"type": "misc"})}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := e.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	// The next polls resolve the other schemas meanwhile.
	eventually(t, 30*time.Second, func() bool { return stand.Requests()-before >= others },
		func() string { return fmt.Sprintf("%d of %d schemas fetched", stand.Requests()-before, others) })
	time.Sleep(200 * time.Millisecond)
	close(kl.release)
	released = true
	e.waitCommittedToEnd(30 * time.Second)
	if dl := e.dlqReasons(); len(dl) != 0 {
		t.Errorf("dead letters %v, want none: the order's schema exists", dl)
	}
	if runs := e.starter.signalsOf("order-o-7"); len(runs) != 1 {
		t.Errorf("order-o-7 received %v, want one delivery", runs)
	}
}

// knownFake is a KnownLedger whose ledger replays and knows the records
// at the offsets of knows (every partition of the test topic); with err
// set, each read fails.
type knownFake struct {
	mu    sync.Mutex
	knows map[int64]bool
	err   error
	reads int
}

func (*knownFake) Replaying() bool { return true }

func (k *knownFake) Known(_ context.Context, recs []KnownRecord, known []int32) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.reads++
	if k.err != nil {
		return k.err
	}
	for i, rec := range recs {
		if k.knows[rec.Offset] {
			known[i] = 1
		}
	}
	return nil
}

func (k *knownFake) readCount() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.reads
}

// A replay's records the ledger knows end without a claim, counted as
// known records and their intents as duplicates; the others are decided
// and claimed in the same poll's turn, and everything is committed, with
// no start. A read that fails only costs the shortcut: every record is
// decided and claimed.
func TestAReplaysKnownRecordsEndWithoutAClaimAndTheOthersAreClaimed(t *testing.T) {
	for _, c := range []struct {
		name        string
		err         error
		wantClaimed []int64
		wantKnown   float64
	}{
		{"known 0 and 2", nil, []int64{1, 3}, 2},
		{"the read fails", errors.New("ledger down"), []int64{0, 1, 2, 3}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newTestEnv(t, 1, envOpt{})
			for i := range 4 {
				id := fmt.Sprintf("kn-%d", i)
				e.produce(0, id, "v")
				e.led.seed(wid(id), decide.LedgerStarted, e.hashOf(id, "v"))
			}
			kf := &knownFake{knows: map[int64]bool{0: true, 2: true}, err: c.err}
			var reg *prometheus.Registry
			e.startWith("r1", e.config(), func(r *Router, rg *prometheus.Registry) { r.known, reg = kf, rg })
			e.waitCommittedToEnd(20 * time.Second)
			var claimed []int64
			for _, batch := range e.led.claimLog() {
				for _, in := range batch {
					claimed = append(claimed, in.Offset)
				}
			}
			if fmt.Sprint(claimed) != fmt.Sprint(c.wantClaimed) {
				t.Errorf("claimed the records at %v, want %v", claimed, c.wantClaimed)
			}
			if kf.readCount() == 0 {
				t.Error("the known path was never taken")
			}
			if got := gathered(t, reg, "dedup_records_known_total"); got != c.wantKnown {
				t.Errorf("dedup_records_known_total %v, want %v", got, c.wantKnown)
			}
			if got := counterOf(t, reg, "dedup_intents_total", "outcome", "duplicate"); got != 4 {
				t.Errorf("duplicate intents %v, want 4", got)
			}
			if n := len(e.starter.executionCounts()); n != 0 {
				t.Errorf("%d workflows started, want 0", n)
			}
		})
	}
}

// counterOf is the value of a counter's series whose label is value.
func counterOf(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label && lp.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no counter %s{%s=%q}", name, label, value)
	return 0
}

// replayOnceKnown is a KnownLedger whose ledger replays for the first poll
// only, and knows no record. Its first read of known records waits until
// the next poll's Replaying (the poll loop, between that poll's resolve and
// its decide) lets it go; that Replaying then waits until the settler has
// resolved the first poll again (settled, closed by the test), so that the
// poll loop decides its poll right after the settler's resolve, as it may
// whenever the two run at once (a large poll's decode takes milliseconds).
type replayOnceKnown struct {
	calls            atomic.Int32
	entered, release chan struct{}
	settled          chan struct{}
	firstRead        atomic.Int32 // how many records the first read asked for
	once             sync.Once
}

func (k *replayOnceKnown) Replaying() bool {
	switch k.calls.Add(1) {
	case 1:
		return true
	case 2:
		close(k.release)
		<-k.settled
	}
	return false
}

func (k *replayOnceKnown) Known(ctx context.Context, recs []KnownRecord, known []int32) error {
	first := false
	k.once.Do(func() { first = true })
	if first {
		k.firstRead.Store(int32(len(recs)))
		close(k.entered)
		select {
		case <-k.release:
		case <-ctx.Done():
		}
	}
	clear(known)
	return nil
}

// The settler resolves its poll's schemas again (settle) while the poll
// loop goes on resolving and deciding the next polls: two resolves of one
// bounded cache at once. A poll the poll loop decides itself (the ledger
// stopped replaying, or the known path is off for a while) must be decided
// with the schemas its own resolve fetched. Here the first poll names the
// cache's bound of schemas (64, boundedRegistry) and waits in the settler; the next poll,
// one order, resolves its schema (the cache forgets one of the first
// poll's for it); the settler then resolves the first poll again and,
// fetching the one it lost, forgets the order's schema (the one entry not
// of its own batch) before the poll loop decides the order: the order, whose
// schema exists, must not be dead-lettered undecodable.
func TestAPollDecidedByThePollLoopKeepsItsSchemasWhileTheSettlerResolvesAgain(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, 1, envOpt{})
	stand := srstandin.New()
	defer stand.Close()
	const others = boundedSchemas
	schemaOf := func(i int) string {
		return fmt.Sprintf(`{"type":"record","name":"Misc%d","namespace":"shop","fields":[{"name":"type","type":"string"}]}`, i)
	}
	otherIDs := make([]int, others)
	for i := range others {
		otherIDs[i], _ = stand.Register(fmt.Sprintf("misc%d-value", i), sr.Schema{Schema: schemaOf(i)})
	}
	idA, _ := stand.Register("events-value", sr.Schema{Schema: orderAvro})
	cfg := manySchemasConfig(t, e, stand.URL(), others)
	// The first poll: the other schemas' records, all produced before
	// the router starts (one fetch, one poll).
	recs := make([]*kgo.Record, others)
	for i, id := range otherIDs {
		recs[i] = &kgo.Record{Topic: testTopic, Partition: 0, Value: avroRecord(t, schemaOf(i), id, map[string]any{"type": "misc"})}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := e.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	kl := &replayOnceKnown{entered: make(chan struct{}), release: make(chan struct{}), settled: make(chan struct{})}
	settledClosed := false
	defer func() {
		if !settledClosed {
			close(kl.settled)
		}
	}()
	bounded := boundedRegistry(t, cfg)
	e.startWith("r1", cfg, func(r *Router, _ *prometheus.Registry) { r.known, r.decider = kl, bounded })
	select {
	case <-kl.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the known path was never taken")
	}
	if n := kl.firstRead.Load(); n != others {
		t.Skipf("the first poll held %d records, not %d: the setup needs them in one poll", n, others)
	}
	before := stand.Requests()
	e.produceRaw(0, avroRecord(t, orderAvro, idA, map[string]any{"type": "order.placed", "order_id": "o-7", "amount": int64(1)}))
	// The poll loop fetches the order's schema, then (Replaying) lets the
	// settler go; the settler would fetch the one schema of its poll the
	// cache forgot, and forget the order's, unless it waits for the poll
	// loop to decide the order (valuesMu): it is given 3 s to.
	for deadline := time.Now().Add(3 * time.Second); stand.Requests()-before < 2 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("%d schemas fetched since the first poll before the order is decided (2: the settler's resolve ran in between)", stand.Requests()-before)
	time.Sleep(300 * time.Millisecond) // a fetch of the settler's is in the cache
	close(kl.settled)
	settledClosed = true
	e.waitCommittedToEnd(30 * time.Second)
	if dl := e.dlqReasons(); len(dl) != 0 {
		t.Errorf("dead letters %v, want none: the order's schema exists", dl)
	}
	if runs := e.starter.signalsOf("order-o-7"); len(runs) != 1 {
		t.Errorf("order-o-7 received %v, want one delivery", runs)
	}
}

// boundedSchemas is the Schema Registry cache's bound under
// boundedRegistry: a test that fills the cache fetches and compiles this
// many schemas, not the default's 4096 (minutes under the race detector).
const boundedSchemas = 64

// boundedRegistry is the decider of cfg (with kafka.schema_registry) whose
// registry cache keeps boundedSchemas schemas (srdecode.NewBounded), for
// a test's startWith to put in place of New's.
func boundedRegistry(t *testing.T, cfg Config) *decide.Decider {
	t.Helper()
	cl, err := schemaregistry.NewClient(cfg.SchemaRegistry, "kafka.schema_registry")
	if err != nil {
		t.Fatal(err)
	}
	dc := cfg.Decide()
	dc.Values = registryValues{srdecode.NewBounded(cl, boundedSchemas)}
	d, err := decide.NewDecider(dc)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// manySchemasConfig is e's router config with the Schema Registry at url,
// its polls large enough for others records of as many schemas at once.
func manySchemasConfig(t *testing.T, e *testEnv, url string, others int) Config {
	t.Helper()
	cfg := registryConfig(t, url)
	cfg.Brokers, cfg.Group = e.cluster.ListenAddrs(), e.group
	base := e.config()
	cfg.SessionTimeout, cfg.RebalanceTimeout, cfg.CommitInterval = base.SessionTimeout, base.RebalanceTimeout, base.CommitInterval
	cfg.Starts, cfg.Retry, cfg.RevokeTimeout, cfg.DrainTimeout, cfg.LagInterval = base.Starts, base.Retry, base.RevokeTimeout, base.DrainTimeout, base.LagInterval
	cfg.MaxPollRecords, cfg.MaxInFlight = 2*others, 4*others
	cfg.FetchMaxPartitionBytes = 8 << 20
	return cfg
}
