package client_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/dedupio/dedup/client"
	"github.com/dedupio/dedup/internal/testsupport/pgtest"
	"github.com/dedupio/dedup/internal/testsupport/tunnelkafka"
	"github.com/dedupio/dedup/processor"
	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/processor/eventid"
	"github.com/dedupio/dedup/sink/ledger"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// The routers' ledger (write access) satisfies the client's reader too.
var _ client.LedgerReader = (*ledger.Postgres)(nil)

const topic = "events"

var routes = decide.Routes{
	{ID: "order-confirmation", Match: decide.Match{Type: "order.created"}, WorkflowType: "W", TaskQueue: "q"},
	{ID: "order-audit", Match: decide.Match{Type: "order.*"}, WorkflowType: "W", TaskQueue: "q", Namespace: "audit"},
	{ID: "nightly", Match: decide.Match{Type: "schedule.fired"}, WorkflowType: "W", TaskQueue: "q", Key: decide.KeyScheduledFor},
}

type env struct {
	t       *testing.T
	cluster *kfake.Cluster
	led     *ledger.Postgres
	c       *client.Client
	adm     *kadm.Client
}

func newEnv(t *testing.T, mod func(*client.Config)) *env {
	t.Helper()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, topic, topic+".dlq"), kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
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
	cfg := client.Config{Topic: topic, EventID: eventid.DefaultConfig(), Routes: routes, Namespace: "default",
		KafkaOpts: []kgo.Opt{kgo.SeedBrokers(cluster.ListenAddrs()...)}, Ledger: led}
	if mod != nil {
		mod(&cfg)
	}
	c, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	kcl, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kcl.Close)
	return &env{t: t, cluster: cluster, led: led, c: c, adm: kadm.NewClient(kcl)}
}

func (e *env) records() int64 {
	e.t.Helper()
	ends, err := e.adm.ListEndOffsets(context.Background(), topic)
	if err != nil {
		e.t.Fatal(err)
	}
	n := int64(0)
	ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
	return n
}

// recordingStarter is Temporal as the router sees it: one run per
// workflow ID, the requests kept.
type recordingStarter struct {
	mu   sync.Mutex
	reqs map[string][]decide.StartRequest
}

func (s *recordingStarter) Start(_ context.Context, req decide.StartRequest) (processor.StartResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reqs[req.WorkflowID] = append(s.reqs[req.WorkflowID], req)
	return processor.StartResult{RunID: "run-" + req.WorkflowID, AlreadyStarted: len(s.reqs[req.WorkflowID]) > 1}, nil
}

func (s *recordingStarter) LastRun(context.Context, string, string) (decide.Run, error) {
	return decide.Run{}, errors.New("not used")
}

// runRouter runs a real router (processor.New) over the env's Kafka and
// ledger until every record is committed, and returns what it started.
func (e *env) runRouter() map[string][]decide.StartRequest {
	e.t.Helper()
	cfg := processor.DefaultConfig()
	cfg.Brokers, cfg.Group, cfg.Topics, cfg.ResetOffset = e.cluster.ListenAddrs(), "dedup", []string{topic}, "earliest"
	cfg.SessionTimeout, cfg.RebalanceTimeout, cfg.CommitInterval = time.Second, time.Second, 20*time.Millisecond
	cfg.Routes = slices.Clone(routes)
	st := &recordingStarter{reqs: map[string][]decide.StartRequest{}}
	r, err := processor.New(cfg, processor.Options{Ledger: e.led, DeadLetterLog: e.led, Starter: st, Registerer: prometheus.NewRegistry(),
		Log: slog.New(slog.DiscardHandler), KafkaOpts: []kgo.Opt{kgo.HeartbeatInterval(100 * time.Millisecond)}})
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			e.t.Fatal(err)
		}
	}()
	want := e.records()
	deadline := time.Now().Add(20 * time.Second)
	for {
		offs, err := e.adm.FetchOffsets(context.Background(), "dedup")
		n := int64(0)
		if err == nil {
			offs.Each(func(o kadm.OffsetResponse) { n += o.At })
		}
		if n == want {
			break
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("router committed %d of %d records", n, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.reqs
}

// The handle's workflow IDs are the router's: a real router, reading the
// records Enqueue wrote, starts exactly those workflows (two routes of one
// type, a route in another namespace, a scheduled_for key), with the data
// as it was sent (JSON, and bytes of another content type).
func TestEnqueueGivesTheRoutersWorkflowIDs(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	order, err := e.c.Enqueue(ctx, client.Event{Type: "order.created", Source: "shop", IdempotencyKey: "order-123", Data: map[string]any{"total": 12.5}})
	if err != nil {
		t.Fatal(err)
	}
	if order.EventID != "order-123" || order.IDRule != eventid.RuleHeader || !order.Produced || order.Repeat {
		t.Fatalf("handle %+v", order)
	}
	wantIDs := []string{"activity-order-confirmation:order-123", "activity-order-audit:order-123"}
	if !slices.Equal(order.WorkflowIDs(), wantIDs) || order.Workflows[1].Namespace != "audit" || order.Workflows[0].Namespace != "default" {
		t.Fatalf("workflows %+v, want %v", order.Workflows, wantIDs)
	}
	tick, err := e.c.Enqueue(ctx, client.Event{Type: "schedule.fired", IdempotencyKey: "tick-1", Data: map[string]string{"scheduled_for": "2026-03-01T10:00:00+01:00"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := tick.WorkflowIDs(); !slices.Equal(got, []string{"activity-nightly:2026-03-01T09:00:00+00:00"}) {
		t.Fatalf("scheduled workflow IDs %v", got)
	}
	proto := []byte{0x08, 0x96, 0x01, 0x00, 0xff}
	bin, err := e.c.Enqueue(ctx, client.Event{Type: "order.created", IdempotencyKey: "order-proto", Data: proto, ContentType: "application/protobuf"})
	if err != nil {
		t.Fatal(err)
	}
	started := e.runRouter()
	var all []string
	for _, h := range []*client.Handle{order, tick, bin} {
		all = append(all, h.WorkflowIDs()...)
	}
	var got []string
	for id := range started {
		got = append(got, id)
	}
	slices.Sort(got)
	slices.Sort(all)
	if !slices.Equal(got, all) {
		t.Fatalf("router started %v, handles said %v", got, all)
	}
	in := started["activity-order-confirmation:order-proto"][0].Input
	if !bytes.Equal(in.DataBase64, proto) || in.DataContentType != "application/protobuf" {
		t.Errorf("binary data reached the workflow as %q (%q)", in.DataBase64, in.DataContentType)
	}
	if in := started["activity-order-confirmation:order-123"][0].Input; string(in.Data) != `{"total":12.5}` || in.Source != "shop" {
		t.Errorf("JSON data reached the workflow as %s from %q", in.Data, in.Source)
	}
	// Once started: the same key gives the same handle, writes nothing, and
	// the status names the run.
	before := e.records()
	again, err := e.c.Enqueue(ctx, client.Event{Type: "order.created", Source: "shop", IdempotencyKey: "order-123", Data: map[string]any{"total": 12.5}})
	if err != nil {
		t.Fatal(err)
	}
	if again.Produced || !again.Repeat || !slices.Equal(again.WorkflowIDs(), order.WorkflowIDs()) || e.records() != before {
		t.Errorf("repeat after start: %+v, %d records (was %d)", again, e.records(), before)
	}
	// A schedule slot is claimed with the slot's hash, not the event's:
	// the same fire again is a repeat, not a conflict.
	tickAgain, err := e.c.Enqueue(ctx, client.Event{Type: "schedule.fired", IdempotencyKey: "tick-1", Data: map[string]string{"scheduled_for": "2026-03-01T10:00:00+01:00"}})
	if err != nil || tickAgain.Produced || !tickAgain.Repeat {
		t.Errorf("the same fire again: %+v %v, want a repeat (nothing written)", tickAgain, err)
	}
	sts, err := again.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range sts {
		if st.Ledger != "started" || st.RunID != "run-"+st.WorkflowID || st.Conflict {
			t.Errorf("status %+v", st)
		}
	}
}

// Under an allow_* policy a repeat after the start is written: it is how
// the router may run a failed run again.
func TestEnqueueRepeatUnderAllowPolicyIsWritten(t *testing.T) {
	e := newEnv(t, func(c *client.Config) {
		c.Routes = slices.Clone(routes)
		c.Routes[0].IDReusePolicy = decide.ReuseAllowDuplicateFailedOnly
	})
	ctx := context.Background()
	ev := client.Event{Type: "order.created", IdempotencyKey: "k1", Data: map[string]int{"v": 1}}
	h, err := e.c.Enqueue(ctx, ev)
	if err != nil {
		t.Fatal(err)
	}
	var started []processor.Started
	for _, id := range h.WorkflowIDs() {
		p := decide.Intent{WorkflowID: id, ActivityID: "a", EventID: "k1", IDRule: "header", Topic: topic}
		rec, _ := ev.Record()
		prep, err := e.c.Prepare(rec)
		if err != nil {
			t.Fatal(err)
		}
		p.PayloadHash = prep.Event.PayloadHash
		if _, err := e.led.Claim(ctx, []decide.Intent{p}); err != nil {
			t.Fatal(err)
		}
		started = append(started, processor.Started{WorkflowID: id, RunID: "r", Generation: 1})
	}
	if err := e.led.MarkStarted(ctx, started); err != nil {
		t.Fatal(err)
	}
	again, err := e.c.Enqueue(ctx, ev)
	if err != nil || !again.Produced || !again.Repeat {
		t.Fatalf("repeat under allow_duplicate_failed_only: %+v %v, want it written, and said a repeat", again, err)
	}
}

// One key with another payload: a *ConflictError once the ledger knows the
// first payload, and the handle says Conflict; the first workflow keeps
// its payload. Here the router recorded the conflict already (it read the
// second copy, written before the first was claimed), so nothing more is
// written (TestEnqueueRecordedConflictIsNotWrittenAgain has the first
// conflict).
func TestEnqueueConflict(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	first := client.Event{Type: "order.created", IdempotencyKey: "k1", Data: map[string]int{"v": 1}}
	if _, err := e.c.Enqueue(ctx, first); err != nil {
		t.Fatal(err)
	}
	// Before a router claimed it, the ledger cannot know: no error.
	other := first
	other.Data = map[string]int{"v": 2}
	if _, err := e.c.Enqueue(ctx, other); err != nil {
		t.Fatalf("conflict before the first is claimed: %v, want none (the router finds it)", err)
	}
	started := e.runRouter()
	if len(started) != 2 || string(started["activity-order-confirmation:k1"][0].Input.Data) != `{"v":1}` {
		t.Fatalf("started %v", started)
	}
	before := e.records()
	h, err := e.c.Enqueue(ctx, other)
	var ce *client.ConflictError
	if !errors.As(err, &ce) || !errors.Is(err, client.ErrConflict) || len(ce.WorkflowIDs) != 2 || h == nil || h.Produced || h.Repeat {
		t.Fatalf("Enqueue = %+v, %v; want a conflict on both workflows, nothing written (recorded already)", h, err)
	}
	if e.records() != before {
		t.Errorf("%d records, want %d", e.records(), before)
	}
	sts, err := h.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !sts[0].Conflict || sts[0].Conflicts < 1 {
		t.Errorf("status %+v, want a conflict (the router recorded one)", sts[0])
	}
	if err := h.Result(ctx, nil); !errors.Is(err, client.ErrSeveralWorkflows) {
		t.Errorf("Result of a two-workflow event: %v, want ErrSeveralWorkflows", err)
	}
}

// Events a router would dead-letter or skip are refused before they are
// written.
func TestEnqueueRefuses(t *testing.T) {
	e := newEnv(t, func(c *client.Config) { c.MaxValueBytes = 64 })
	ctx := context.Background()
	cases := map[string]struct {
		ev     client.Event
		reason string
		is     error
	}{
		"no key":     {ev: client.Event{Type: "order.created"}, is: client.ErrNoKey},
		"no type":    {ev: client.Event{IdempotencyKey: "k"}, reason: "missing_type"},
		"no route":   {ev: client.Event{Type: "invoice.paid", IdempotencyKey: "k"}, reason: "no_route"},
		"oversized":  {ev: client.Event{Type: "order.created", IdempotencyKey: "k", Data: bytes.Repeat([]byte("x"), 65)}, reason: "oversized"},
		"bad key":    {ev: client.Event{Type: "order.created", IdempotencyKey: "a\nb"}, reason: "invalid_id"},
		"no slot":    {ev: client.Event{Type: "schedule.fired", IdempotencyKey: "k", Data: map[string]int{}}, reason: "undecodable"},
		"not a json": {ev: client.Event{Type: "order.created", IdempotencyKey: "k", Data: []byte("{"), ContentType: "application/json"}, reason: "undecodable"},
	}
	for name, tc := range cases {
		_, err := e.c.Enqueue(ctx, tc.ev)
		var inv *client.InvalidEventError
		switch {
		case tc.is != nil && !errors.Is(err, tc.is):
			t.Errorf("%s: %v, want %v", name, err, tc.is)
		case tc.reason != "" && (!errors.As(err, &inv) || inv.Reason != tc.reason):
			t.Errorf("%s: %v, want reason %s", name, err, tc.reason)
		}
	}
	if n := e.records(); n != 0 {
		t.Errorf("%d records written, want 0", n)
	}
	// A config under which the key is not the ID: refused, not written.
	e2 := newEnv(t, func(c *client.Config) { c.EventID.Chain = []eventid.Rule{eventid.RuleContent} })
	var mismatch *client.KeyMismatchError
	if _, err := e2.c.Enqueue(ctx, client.Event{Type: "order.created", IdempotencyKey: "k"}); !errors.As(err, &mismatch) ||
		mismatch.Key != "k" || mismatch.Rule != eventid.RuleContent || mismatch.EventID == "k" {
		t.Errorf("key not the ID under a content-only chain: %v, want a *KeyMismatchError", err)
	}
	if n := e2.records(); n != 0 {
		t.Errorf("%d records written, want 0", n)
	}
}

// A conflict the routers recorded already (the same key with the same
// other payload) is answered from the ledger: a *ConflictError, and no
// record (each one would be one more dedup_conflicts row and dead letter).
// A conflict not recorded yet, such as a third payload, is written so that
// the router records it.
func TestEnqueueRecordedConflictIsNotWrittenAgain(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	first := client.Event{Type: "order.created", IdempotencyKey: "k1", Data: map[string]int{"v": 1}}
	if _, err := e.c.Enqueue(ctx, first); err != nil {
		t.Fatal(err)
	}
	e.runRouter()
	other := first
	other.Data = map[string]int{"v": 2}
	h, err := e.c.Enqueue(ctx, other)
	if !errors.Is(err, client.ErrConflict) || !h.Produced {
		t.Fatalf("first conflict: %+v %v, want a *ConflictError and the record written", h, err)
	}
	e.runRouter() // records the conflict
	before := e.records()
	for i := range 3 {
		h, err := e.c.Enqueue(ctx, other)
		var ce *client.ConflictError
		if !errors.As(err, &ce) || len(ce.WorkflowIDs) != 2 || h == nil || h.Produced {
			t.Fatalf("recorded conflict again (%d): %+v %v, want a *ConflictError on both workflows and nothing written", i, h, err)
		}
	}
	if n := e.records(); n != before {
		t.Errorf("%d records after the recorded conflict was sent again, want %d", n, before)
	}
	third := first
	third.Data = map[string]int{"v": 3}
	if h, err := e.c.Enqueue(ctx, third); !errors.Is(err, client.ErrConflict) || !h.Produced {
		t.Errorf("a conflict not recorded yet: %+v %v, want it written", h, err)
	}
}

// A producer that builds its own Kafka options (kgo.SASL, no TLS) through a
// seed on this machine that advertises brokers off it: Enqueue never sends
// the credentials to an advertised broker in plaintext (the dial is
// refused; nothing is written), unless Config.AllowInsecure. The bound:
// the refused write retries until its context ends (3s).
func TestEnqueueNeverSendsSASLInPlaintextToAnAdvertisedRemoteBroker(t *testing.T) {
	tk := tunnelkafka.Start(t, kfake.EnableSASL(), kfake.Superuser("PLAIN", "producer", "pa55"), kfake.SeedTopics(1, topic))
	enqueue := func(allow bool) error {
		c, err := client.New(client.Config{Topic: topic, EventID: eventid.DefaultConfig(), Routes: routes, Namespace: "default",
			KafkaOpts:     []kgo.Opt{kgo.SeedBrokers(tk.Seed), kgo.SASL(plain.Auth{User: "producer", Pass: "pa55"}.AsMechanism())},
			AllowInsecure: allow})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_, err = c.Enqueue(ctx, client.Event{Type: "order.created", IdempotencyKey: "order-1", Data: map[string]int{"n": 1}})
		return err
	}
	if err := enqueue(false); err == nil {
		t.Error("Enqueue through the tunnel wrote the event, want it refused")
	}
	if n := tk.RemoteConns(); n != 0 {
		t.Fatalf("%d connections reached the advertised broker %s with SASL and no TLS", n, tk.Advertised)
	}
	if err := enqueue(true); err != nil {
		t.Fatalf("with AllowInsecure: %v", err)
	}
	if tk.RemoteConns() == 0 {
		t.Fatal("with AllowInsecure no connection reached the advertised address: the test cannot see one")
	}
}

// kgo.Dialer(nil) is no dialer of the caller's own: franz-go fills in its
// plaintext default. GuardKafka's marker check (a dialer set by the options
// means the caller checks it) takes that default for the caller's and
// returns the options unguarded, so SASL goes in plaintext to a broker the
// tunnel advertises off this machine. The bound: the refused write retries
// until its context ends (3s).
func TestEnqueueNeverSendsSASLInPlaintextWhenTheOptionsResetTheDialer(t *testing.T) {
	tk := tunnelkafka.Start(t, kfake.EnableSASL(), kfake.Superuser("PLAIN", "producer", "pa55"), kfake.SeedTopics(1, topic))
	c, err := client.New(client.Config{Topic: topic, EventID: eventid.DefaultConfig(), Routes: routes, Namespace: "default",
		KafkaOpts: []kgo.Opt{kgo.SeedBrokers(tk.Seed), kgo.SASL(plain.Auth{User: "producer", Pass: "pa55"}.AsMechanism()),
			kgo.Dialer(nil)}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err = c.Enqueue(ctx, client.Event{Type: "order.created", IdempotencyKey: "order-1", Data: map[string]int{"n": 1}})
	if n := tk.RemoteConns(); n != 0 {
		t.Fatalf("%d connections reached the advertised broker %s with SASL and no TLS (Enqueue: %v)", n, tk.Advertised, err)
	}
	if err == nil {
		t.Error("Enqueue through the tunnel wrote the event, want it refused")
	}
}

// docs/security.md (Conflicts): "a repeat of a recorded conflict is not
// written again". The lookup reads only the 64 conflicts last seen per
// workflow ID (ledgerread.MaxConflictHashes), so a producer cycling over 65
// conflicting payloads under one key finds each repeat missing from the
// lookup, and every repeat is written again: a record, a dead letter and a
// claim each time, forever. The first conflicting payload is recorded by
// one router run, the 64 others by a later one (so it is the one last seen
// longest ago).
func TestEnqueueNeverWritesARecordedConflictAgainWhateverTheOtherConflicts(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	ev := func(v int) client.Event {
		return client.Event{Type: "order.created", IdempotencyKey: "k1", Data: map[string]int{"v": v}}
	}
	if _, err := e.c.Enqueue(ctx, ev(1)); err != nil {
		t.Fatal(err)
	}
	e.runRouter()
	if h, err := e.c.Enqueue(ctx, ev(2)); !errors.Is(err, client.ErrConflict) || !h.Produced {
		t.Fatalf("first conflicting payload: %+v %v, want it written (not recorded yet)", h, err)
	}
	e.runRouter()
	for v := 3; v < 3+64; v++ {
		if _, err := e.c.Enqueue(ctx, ev(v)); !errors.Is(err, client.ErrConflict) {
			t.Fatalf("payload %d: %v", v, err)
		}
	}
	e.runRouter()
	before := e.records()
	h, err := e.c.Enqueue(ctx, ev(2))
	if !errors.Is(err, client.ErrConflict) || h == nil || h.Produced || e.records() != before {
		t.Fatalf("the recorded conflict {v:2} again after 64 others: %+v %v, %d records (was %d); want a *ConflictError and nothing written", h, err, e.records(), before)
	}
}

// A value in a schema registry's wire format (a zero byte, a schema ID,
// the encoded record) is read by the routers as the record the registry's
// schema decodes (kafka.schema_registry): its content ID and payload hash
// are over that JSON. The client has no registry to decode with, so it
// refuses such a value (undecodable) rather than predict an ID and a
// payload hash from the raw bytes that the routers' never match (Send
// would then report a re-sent record as a conflict). In CloudEvents
// binary mode too, where any other value is opaque data.
func TestPrepareRefusesARegistryFramedValue(t *testing.T) {
	c, err := client.New(client.Config{Topic: topic, EventID: eventid.DefaultConfig(), Routes: routes,
		KafkaOpts: []kgo.Opt{kgo.SeedBrokers("127.0.0.1:1")}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	framed := []byte{0, 0, 0, 0, 7, 0x18, 'o', '-', '7'} // schema 7, an Avro string
	binary := []kgo.RecordHeader{{Key: "ce_specversion", Value: []byte("1.0")}, {Key: "ce_id", Value: []byte("k-9")},
		{Key: "ce_type", Value: []byte("order.created")}, {Key: "ce_source", Value: []byte("/shop")}}
	for name, r := range map[string]*kgo.Record{
		"plain":                   {Value: framed},
		"cloudevents binary mode": {Value: framed, Headers: binary},
	} {
		_, err := c.Prepare(r)
		var inv *client.InvalidEventError
		if !errors.As(err, &inv) || inv.Reason != string(eventid.ReasonUndecodable) {
			t.Errorf("%s: Prepare gave %v, want undecodable", name, err)
		}
	}
	// Opaque binary-mode data that is not framed is still accepted.
	if _, err := c.Prepare(&kgo.Record{Value: []byte{1, 2, 3}, Headers: binary}); err != nil {
		t.Errorf("opaque data: %v", err)
	}
}
