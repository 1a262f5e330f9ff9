package processor

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/processor/eventid"
	"github.com/dedupio/dedup/processor/tenantsig"
	"github.com/dedupio/dedup/schemas"
)

func TestDecide(t *testing.T) {
	base := func() Config {
		cfg := DefaultConfig()
		cfg.Brokers, cfg.Group, cfg.Topics, cfg.ResetOffset = []string{"x:1"}, "g", []string{testTopic}, "earliest"
		cfg.MaxValueBytes = 200
		cfg.Routes = decide.Routes{
			{ID: "a1", Match: decide.Match{Type: "order.created"}, WorkflowType: "W", TaskQueue: "q"},
			{ID: "a2", Match: decide.Match{Type: "order.*"}, WorkflowType: "W", TaskQueue: "q", IDReusePolicy: decide.ReuseAllowDuplicate},
			{ID: "cron", Match: decide.Match{Type: "tick"}, WorkflowType: "W", TaskQueue: "q", Key: decide.KeyScheduledFor},
		}
		return cfg
	}
	cases := []struct {
		name       string
		noRoute    string
		value      string
		deadLetter decide.Reason
		skipped    bool
		workflows  string
	}{
		{name: "two routes", value: `{"id":"e1","type":"order.created","data":{}}`, workflows: "activity-a1:e1,activity-a2:e1"},
		{name: "prefix route only", value: `{"id":"e2","type":"order.paid"}`, workflows: "activity-a2:e2"},
		{name: "scheduled_for key", value: `{"specversion":"1.0","id":"e3","type":"tick","data":{"scheduled_for":"2026-03-01T10:00:00+01:00"}}`,
			workflows: "activity-cron:2026-03-01T09:00:00+00:00"},
		{name: "scheduled_for missing", value: `{"specversion":"1.0","id":"e4","type":"tick","data":{}}`, deadLetter: decide.ReasonUndecodable},
		{name: "not json", value: `nope`, deadLetter: decide.ReasonUndecodable},
		{name: "no type", value: `{"id":"e5"}`, deadLetter: decide.ReasonMissingType},
		{name: "oversized", value: `{"id":"e6","type":"order.created","data":"` + strings.Repeat("x", 300) + `"}`, deadLetter: decide.ReasonOversized},
		{name: "no route skipped", value: `{"id":"e7","type":"audit"}`, skipped: true},
		{name: "no route dead-lettered", noRoute: "dead_letter", value: `{"id":"e8","type":"audit"}`, deadLetter: decide.ReasonNoRoute},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := base()
			if c.noRoute != "" {
				cfg.NoRoute = c.noRoute
			}
			if err := cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			d, err := decide.NewDecider(cfg.Decide())
			if err != nil {
				t.Fatal(err)
			}
			dec := d.Decide(&kgo.Record{Topic: testTopic, Partition: 2, Offset: 9, Value: []byte(c.value)})
			var wids []string
			for i, in := range dec.Intents {
				wids = append(wids, in.WorkflowID)
				hash := dec.Event.PayloadHash // a slot's claims hash the activity and the slot only
				kind, slot := schemas.TriggerEvent, ""
				if rt := dec.Routes[i]; rt.Key == decide.KeyScheduledFor {
					slot = strings.TrimPrefix(in.WorkflowID, "activity-"+rt.ID+":")
					hash, kind = decide.SlotPayloadHash(rt.ID, slot), schemas.TriggerCron
				}
				st := dec.Start(i)
				if in.Topic != testTopic || in.Partition != 2 || in.Offset != 9 || in.EventID != dec.Event.ID ||
					in.PayloadHash != hash || st.WorkflowID != in.WorkflowID || st.Input.WorkflowID != in.WorkflowID ||
					st.ReusePolicy != dec.Routes[i].IDReusePolicy || st.Input.TriggerKind != kind || st.Input.ScheduledFor != slot {
					t.Errorf("intent %d %+v does not match the record, event or start %+v", i, in, st)
				}
			}
			if dec.DeadLetter != c.deadLetter || dec.Skipped() != c.skipped || strings.Join(wids, ",") != c.workflows {
				t.Fatalf("dead letter %q (%v), skipped %v, workflows %q; want %q, %v, %q",
					dec.DeadLetter, dec.Err, dec.Skipped(), strings.Join(wids, ","), c.deadLetter, c.skipped, c.workflows)
			}
			if (dec.DeadLetter != "") != (dec.Err != nil) {
				t.Fatalf("dead letter %q with error %v", dec.DeadLetter, dec.Err)
			}
		})
	}
}

// syncBuffer is a log sink the router's goroutines share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) lines(t *testing.T) []map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(s.b.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

// TestDecisionLog: at info, each non-duplicate decision (new, re-drive,
// conflict, dead letter, no-route skip) is one line with
// the fields operators filter on (decision, workflow_id, event_id, rule,
// topic, partition, offset), and a redelivered record does not log its
// dead letter again; duplicates are sampled. (The rerun line is logged by
// the start pool where an allow_* route runs a closed workflow again.)
func TestDecisionLog(t *testing.T) {
	e := newTestEnv(t, 1, envOpt{})
	cfg := e.config()
	var buf syncBuffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	run := func() {
		r, err := New(cfg, Options{Ledger: e.led, DeadLetterLog: e.dlq, Starter: e.starter.as("r"), Registerer: prometheus.NewRegistry(), Log: log, KafkaOpts: []kgo.Opt{
			kgo.HeartbeatInterval(100 * time.Millisecond), kgo.MetadataMinAge(50 * time.Millisecond)}})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		e.waitCommittedToEnd(10 * time.Second)
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	e.produce(0, "a", "1")                                      // 0: new
	e.produce(0, "a", "1")                                      // 1: duplicate (in flight or started)
	e.produce(0, "a", "2")                                      // 2: conflict
	e.produceRaw(0, []byte("garbage"))                          // 3: undecodable
	e.produceRaw(0, []byte(`{"id":"n","type":"audit.logged"}`)) // 4: no route, skipped
	e.led.seed(wid("p"), statePending, e.hashOf("p", "1"))      // a claim a crash left pending
	e.produce(0, "p", "1")                                      // 5: re-drive
	run()
	// Redeliver everything: only duplicates now, and the conflict and the
	// dead letter are found written already.
	var zero kadm.Offsets
	zero.Add(kadm.Offset{Topic: testTopic, Partition: 0, At: 0, LeaderEpoch: -1})
	if err := e.adm.CommitAllOffsets(context.Background(), e.group, zero); err != nil {
		t.Fatal(err)
	}
	run()

	count := map[string]int{}
	for _, l := range buf.lines(t) {
		d, _ := l["decision"].(string)
		if d == "" {
			continue
		}
		count[d]++
		off := l["offset"].(float64)
		want := map[string]float64{"new": 0, "conflict": 2, "dead_letter": 3, "skipped_no_route": 4, "redrive": 5}
		if w, ok := want[d]; ok && off != w {
			t.Errorf("%s logged at offset %v, want %v: %v", d, off, w, l)
		}
		switch d {
		case "new", "conflict":
			if l["workflow_id"] != wid("a") || l["event_id"] != "a" || l["rule"] != "field" || l["topic"] != testTopic || l["partition"] != 0.0 {
				t.Errorf("%s line lacks its fields: %v", d, l)
			}
		case "redrive":
			if l["workflow_id"] != wid("p") || l["event_id"] != "p" || l["generation"] == nil {
				t.Errorf("redrive line lacks its fields: %v", l)
			}
		case "dead_letter":
			if l["reason"] != "undecodable" || l["event_id"] != "" {
				t.Errorf("dead letter line: %v", l)
			}
		case "skipped_no_route":
			if l["event_id"] != "n" || l["type"] != "audit.logged" {
				t.Errorf("no-route line: %v", l)
			}
		case "duplicate":
			if l["sampled"] != true || l["workflow_id"] != wid("a") {
				t.Errorf("duplicate line: %v", l)
			}
		}
	}
	// Each router logs its first duplicate; the second run's two
	// duplicates of a are one poll batch, well within a second: one line.
	if count["new"] != 1 || count["conflict"] != 1 || count["dead_letter"] != 1 || count["skipped_no_route"] != 2 ||
		count["duplicate"] != 2 || count["redrive"] != 1 {
		t.Fatalf("decision lines %v; want new 1, redrive 1, conflict 1, dead_letter 1, skipped_no_route 2 (one per read), duplicate 2", count)
	}
}

// A workflow ID over Temporal's 1,000 bytes (limit.maxIDLength) can never
// start: the record is dead-lettered before any claim, as invalid_id,
// rather than claimed and refused by Temporal for good. Here: a 900-byte
// ID (event_id.max_id_length allows it), a UUID route ID and a 63-byte
// tenant: 1,010 bytes.
func TestDecideWorkflowIDTooLong(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Brokers, cfg.Group, cfg.Topics, cfg.ResetOffset = []string{"x:1"}, "g", []string{testTopic}, "earliest"
	cfg.EventID.MaxIDLength = 900
	cfg.Routes = decide.Routes{{ID: "550e8400-e29b-41d4-a716-446655440000", Match: decide.Match{Type: "order.created"}, WorkflowType: "W", TaskQueue: "q"}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	var err error
	if cfg.TenantKeys, err = tenantsig.Parse("kafka.tenant_keys_file", []byte("keys: [{id: k1, secret: dGVzdC10ZW5hbnQta2V5LTAxMjM0NTY3ODlhYmNkZWY=}]")); err != nil {
		t.Fatal(err)
	}
	d, err := decide.NewDecider(cfg.Decide())
	if err != nil {
		t.Fatal(err)
	}
	rec := func(tenant string) *kgo.Record {
		r := &kgo.Record{Topic: testTopic, Value: []byte(`{"id":"` + strings.Repeat("i", 900) + `","type":"order.created"}`)}
		if tenant != "" {
			r.Headers = []kgo.RecordHeader{{Key: eventid.TenantHeader, Value: []byte(tenant)}}
			if err := d.SignTenant(r); err != nil {
				t.Fatal(err)
			}
		}
		return r
	}
	if dec := d.Decide(rec(strings.Repeat("t", eventid.MaxTenantLength))); dec.DeadLetter != decide.ReasonInvalidID || !strings.Contains(fmt.Sprint(dec.Err), "1000") {
		t.Errorf("1,010-byte workflow ID: dead letter %q (%v), want invalid_id naming the limit", dec.DeadLetter, dec.Err)
	}
	if dec := d.Decide(rec("")); dec.DeadLetter != "" || len(dec.Intents) != 1 {
		t.Errorf("946-byte workflow ID: dead letter %q (%v), want one workflow", dec.DeadLetter, dec.Err)
	}
}
