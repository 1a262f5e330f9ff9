package integration

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/dedupio/dedup/integration/devstack"
	"github.com/dedupio/dedup/internal/app"
	"github.com/dedupio/dedup/internal/config"
	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/processor/schedule"
	"github.com/dedupio/dedup/schemas"
	"github.com/dedupio/dedup/sink/starter"
)

// Namespaces registered without dedup's search attributes, as a cluster
// whose operator has not created them (TestMain registers them).
const (
	nsBareOn   = "bare-on"
	nsBareOff  = "bare-off"
	nsBareAuto = "bare-auto"
)

// registerSearchAttributes gives namespace ns dedup's search attributes,
// as an operator would (OperatorService.AddSearchAttributes).
func registerSearchAttributes(ctx context.Context, ns string) error {
	c, err := client.Dial(client.Options{HostPort: stack.Temporal.HostPort(), Logger: quietTemporalLogger()})
	if err != nil {
		return err
	}
	defer c.Close()
	return devstack.RegisterSearchAttributes(ctx, c.OperatorService(), ns)
}

// produceOrders writes n order.created records with IDs prefix-0… to
// partition 0 and returns their offsets by event ID.
func (e *env) produceOrders(prefix string, n int) map[string]int64 {
	e.t.Helper()
	var recs []*kgo.Record
	for i := range n {
		recs = append(recs, &kgo.Record{Topic: e.topic, Partition: 0,
			Value: []byte(fmt.Sprintf(`{"id":"%s-%d","type":"order.created","data":{"n":%d}}`, prefix, i, i))})
	}
	if err := e.kcl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		e.t.Fatal(err)
	}
	out := map[string]int64{}
	for i, r := range recs {
		out[fmt.Sprintf("%s-%d", prefix, i)] = r.Offset
	}
	return out
}

// findWorkflows lists the env namespace's workflows that query matches,
// polling until it finds want of them: visibility is written after the
// start, asynchronously (the in-memory server's SQLite visibility within
// a second or so); the bound is 30 s.
func (e *env) findWorkflows(query string, want int) []string {
	e.t.Helper()
	var ids []string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		resp, err := e.tc.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{Query: query, PageSize: 100})
		if err != nil {
			e.t.Fatalf("listing %s: %v", query, err)
		}
		ids = ids[:0]
		for _, ex := range resp.Executions {
			ids = append(ids, ex.GetExecution().GetWorkflowId())
		}
		if len(ids) >= want {
			break
		}
	}
	return ids
}

func TestStartedWorkflowsAreFoundByTheirRecordInTemporal(t *testing.T) {
	e := newEnv(t, 1)
	r := e.startRouter(e.config())
	defer r.stop(t)
	offsets := e.produceOrders("sa", 3)
	e.waitCommitted(time.Minute)

	for id, off := range offsets {
		wid := decide.WorkflowID("order-confirmation", id)
		for _, q := range []string{
			fmt.Sprintf(`DedupEventId = %q`, id),
			fmt.Sprintf(`DedupKafkaTopic = %q AND DedupKafkaPartition = 0 AND DedupKafkaOffset = %d`, e.topic, off),
			fmt.Sprintf(`DedupEventId = %q AND DedupRoute = "order-confirmation" AND DedupIdRule = "field"`, id),
		} {
			got := e.findWorkflows(q, 1)
			if len(got) != 1 || got[0] != wid {
				t.Errorf("%s found %v, want [%s]", q, got, wid)
			}
		}
	}
	if got := e.findWorkflows(fmt.Sprintf(`DedupKafkaTopic = %q`, e.topic), 3); len(got) != 3 {
		t.Errorf("the topic's runs: %v, want 3", got)
	}
}

// startRun runs app.Run in the background: ready when it polls, done
// with its error.
func startRun(cfg config.Config) (ready chan string, done chan error, stop context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	ready, done = make(chan string, 1), make(chan error, 1)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	go func() {
		done <- app.Run(ctx, cfg, app.Options{Logger: log, Registry: prometheus.NewRegistry(), Ready: ready})
	}()
	return ready, done, cancel
}

func TestStartUpStopsWhenTheNamespaceLacksSearchAttributes(t *testing.T) {
	e := newEnvIn(t, 1, nsBareOn)
	ready, done, stop := startRun(e.config()) // temporal.search_attributes: on, the default
	defer stop()
	var err error
	select {
	case <-ready:
		t.Fatal("the router started in a namespace without dedup's search attributes")
	case err = <-done:
	case <-time.After(time.Minute):
		t.Fatal("start-up neither stopped nor started in a minute")
	}
	var missing *starter.MissingSearchAttributesError
	if !errors.As(err, &missing) {
		t.Fatalf("start-up ended with %v, want the missing search attributes", err)
	}
	msg := err.Error()
	want := []string{"temporal operator search-attribute create --namespace " + nsBareOn, "temporal.search_attributes: off"}
	for _, a := range starter.SearchAttributes() {
		want = append(want, fmt.Sprintf("%s (%s)", a.Name, a.Type), fmt.Sprintf("--name %s --type %s", a.Name, a.Type))
	}
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("the error lacks %q: %s", w, msg)
		}
	}

	// dedup validate says the same when it reaches Temporal.
	if _, err := app.CheckSearchAttributes(context.Background(), e.config()); !errors.As(err, &missing) {
		t.Fatalf("dedup validate's check: %v, want the missing search attributes", err)
	}
	good := e.config()
	good.Temporal.Namespace = "default" // the dev stack's: created with them
	if line, err := app.CheckSearchAttributes(context.Background(), good); err != nil || line != "search attributes present" {
		t.Fatalf("dedup validate's check of a namespace with them: %q, %v", line, err)
	}
}

func TestRunsCarryNoSearchAttributesWhenOff(t *testing.T) {
	runsWithoutSearchAttributes(t, nsBareOff, starter.SearchAttributesOff)
}

func TestRunsCarryNoSearchAttributesUnderAutoWhenTheNamespaceLacksThem(t *testing.T) {
	runsWithoutSearchAttributes(t, nsBareAuto, starter.SearchAttributesAuto)
}

// runsWithoutSearchAttributes starts a router in ns, a namespace without
// dedup's search attributes, under mode: it starts, and its runs carry
// none.
func runsWithoutSearchAttributes(t *testing.T, ns string, mode starter.SearchAttributesMode) {
	e := newEnvIn(t, 1, ns)
	cfg := e.config()
	cfg.Temporal.SearchAttributes = mode
	r := e.startRouter(cfg)
	defer r.stop(t)
	e.produceOrders(string(mode), 2)
	e.waitCommitted(time.Minute)
	for i := range 2 {
		wid := decide.WorkflowID("order-confirmation", fmt.Sprintf("%s-%d", mode, i))
		// Describe reads the run's mutable state: no visibility lag.
		d, err := e.tc.DescribeWorkflowExecution(context.Background(), wid, "")
		if err != nil {
			t.Fatalf("the run of %s: %v", wid, err)
		}
		if f := d.GetWorkflowExecutionInfo().GetSearchAttributes().GetIndexedFields(); len(f) != 0 {
			t.Errorf("%s carries search attributes %v under search_attributes: %s", wid, f, mode)
		}
	}
}

func TestScheduledRunsAreFoundByTheirSlotInTemporal(t *testing.T) {
	e := newEnv(t, 1)
	cfg := e.config()
	cfg.Schedules = schedConfig(schedule.Skip)
	cfg.Schedules.Triggers[0].Cron = "* * * * * *"
	cfg.Schedules.Triggers[0].MisfireThreshold = 2 * time.Second
	cfg.Schedules.Triggers[0].Overlap = schedule.OverlapAllowAll // no worker: runs stay open
	r := e.startRouter(cfg)
	got := e.findWorkflows(fmt.Sprintf(`DedupRoute = %q AND DedupIdRule = "schedule"`, schedActivity), 1)
	r.stop(t)
	if len(got) == 0 {
		t.Fatal("no scheduled run found by DedupRoute and DedupIdRule in 30 s of a per-second trigger")
	}
	wid := got[0]
	slot, err := time.Parse(time.RFC3339, strings.TrimPrefix(wid, decide.WorkflowID(schedActivity, "")))
	if err != nil {
		t.Fatalf("the slot of %s: %v", wid, err)
	}
	// Describe reads the run's mutable state: the attribute as stored.
	d, err := e.tc.DescribeWorkflowExecution(context.Background(), wid, "")
	if err != nil {
		t.Fatal(err)
	}
	var at time.Time
	p := d.GetWorkflowExecutionInfo().GetSearchAttributes().GetIndexedFields()[starter.AttrScheduledFor]
	if err := converter.GetDefaultDataConverter().FromPayload(p, &at); err != nil || !at.Equal(slot) {
		t.Fatalf("%s of %s: %v (%v), want %v", starter.AttrScheduledFor, wid, at, err, slot)
	}
	// A slot is found by a range: the in-memory server's SQLite
	// visibility keeps a Datetime as text with its fraction, which an
	// equality with a literal that has none does not match.
	for _, q := range []string{
		fmt.Sprintf(`DedupEventId = "schedule/report/%s"`, decide.ScheduledForKey(slot)),
		fmt.Sprintf(`DedupScheduledFor >= %q AND DedupScheduledFor < %q`, slot.Format(time.RFC3339), slot.Add(time.Second).Format(time.RFC3339)),
	} {
		if found := e.findWorkflows(q, 1); len(found) != 1 || found[0] != wid {
			t.Errorf("%s found %v, want [%s]", q, found, wid)
		}
	}
}

// An entity workflow, which many events signal, carries its route only:
// not the event that happened to start it.
func TestEntityWorkflowsCarryTheirRouteOnly(t *testing.T) {
	e := newEnv(t, 1)
	cfg := e.config()
	cfg.Routes = decide.Routes{signalRoute("sig-"+e.namespace, "")} // no worker: the run stays open
	var recs []*kgo.Record
	for i := range 2 {
		recs = append(recs, &kgo.Record{Topic: e.topic, Partition: 0,
			Value: []byte(fmt.Sprintf(`{"specversion":"1.0","id":"ent-ev-%d","type":"entity.changed","data":{"entity":"x"}}`, i))})
	}
	if err := e.kcl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	r := e.startRouter(cfg)
	e.waitCommitted(time.Minute)
	r.stop(t)
	d, err := e.tc.DescribeWorkflowExecution(context.Background(), "ent-x", "")
	if err != nil {
		t.Fatal(err)
	}
	f := d.GetWorkflowExecutionInfo().GetSearchAttributes().GetIndexedFields()
	var route string
	if len(f) != 1 || converter.GetDefaultDataConverter().FromPayload(f[starter.AttrRoute], &route) != nil || route != "entities" {
		t.Fatalf("ent-x carries %v, want %s = entities only", f, starter.AttrRoute)
	}
	if got := e.findWorkflows(`DedupRoute = "entities"`, 1); len(got) != 1 || got[0] != "ent-x" {
		t.Fatalf(`DedupRoute = "entities" found %v, want [ent-x]`, got)
	}
}

// A namespace that has one of dedup's search attributes with another
// type (created by hand, or removed and created again after start-up
// checked it; or never checked: an API key that may not list them)
// refuses every start that carries it ("invalid value for search
// attribute DedupKafkaOffset of type Keyword"). That is the namespace's,
// not the record's, as an undefined attribute is: the start waits for an
// operator (not permanent) rather than dead-lettering every record.
func TestSearchAttributeOfAnotherTypeWaitsForTheNamespace(t *testing.T) {
	ctx := context.Background()
	ns := fmt.Sprintf("sa-wrong-type-%d", time.Now().UnixNano())
	if err := registerBareNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	e := newEnvIn(t, 1, ns)
	attrs := map[string]enumspb.IndexedValueType{}
	for _, a := range starter.SearchAttributes() {
		attrs[a.Name] = a.Type
	}
	attrs[starter.AttrKafkaOffset] = enumspb.INDEXED_VALUE_TYPE_KEYWORD
	if _, err := e.tc.OperatorService().AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{
		Namespace: ns, SearchAttributes: attrs}); err != nil {
		t.Fatal(err)
	}
	st := starter.New(e.tc, starter.Config{Namespace: ns, StartTimeout: 10 * time.Second})
	req := decide.StartRequest{WorkflowID: "activity-a:evt-1", WorkflowType: "RunActivityWorkflow", TaskQueue: "nobody",
		ReusePolicy: decide.ReuseRejectDuplicate, Input: schemas.WorkflowInput{EventID: "evt-1", ActivityID: "a", IDRule: "field"},
		Record: &decide.RecordRef{Topic: e.topic, Partition: 0, Offset: 7}}
	// The namespace and its attributes reach the frontend's caches within
	// seconds; the bound is 30 s.
	var err error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		_, err = st.Start(ctx, req)
		var nf *serviceerror.NamespaceNotFound
		if err == nil || !errors.As(err, &nf) && !strings.Contains(err.Error(), "is not defined") {
			break
		}
	}
	if err == nil {
		t.Fatalf("a run started with %s = 7 in a namespace where it is a Keyword", starter.AttrKafkaOffset)
	}
	if starter.IsPermanent(err) {
		t.Fatalf("%v is permanent: every record would be dead-lettered until an operator fixes the namespace", err)
	}
}
