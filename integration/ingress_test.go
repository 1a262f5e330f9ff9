package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/cloudevents/sdk-go/protocol/kafka_sarama/v2"
	cloudevents "github.com/cloudevents/sdk-go/v2"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/dedupio/dedup/client"
	"github.com/dedupio/dedup/internal/config"
	"github.com/dedupio/dedup/internal/dial"
	"github.com/dedupio/dedup/internal/ingress"
	"github.com/dedupio/dedup/schemas"
)

// The ingress tests' namespaces, registered by TestMain with the others.
func init() {
	namespaces = append(namespaces, "ingress1", "ingress2", "ingress3", "ingress4", "ingress5", "ingress6", "ingress7", "ingress8")
}

// ingressRun is an in-process `dedup ingress`.
type ingressRun struct {
	url    string
	reg    *prometheus.Registry
	cancel context.CancelFunc
	done   chan error
}

func (e *env) startIngress(cfg config.Config, locked func(string)) *ingressRun {
	e.t.Helper()
	cfg.Ingress.Listen, cfg.Ingress.AdminListen = "127.0.0.1:0", ""
	ctx, cancel := context.WithCancel(context.Background())
	in := &ingressRun{reg: prometheus.NewRegistry(), cancel: cancel, done: make(chan error, 1)}
	ready := make(chan string, 1)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	go func() {
		in.done <- ingress.Run(ctx, cfg, ingress.RunOptions{Logger: log, Registry: in.reg, Ready: ready, Locked: locked})
	}()
	select {
	case addr := <-ready:
		in.url = "http://" + addr
	case err := <-in.done:
		e.t.Fatalf("ingress exited at start: %v", err)
	case <-time.After(time.Minute):
		e.t.Fatal("ingress not up after a minute")
	}
	e.t.Cleanup(func() {
		cancel()
		if err := <-in.done; err != nil {
			e.t.Errorf("ingress: %v", err)
		}
	})
	return in
}

// resultWorker runs a RunActivityWorkflow on the env's task queue that
// returns the event ID and data it was started with.
func (e *env) resultWorker() {
	e.t.Helper()
	w := sdkworker.New(e.tc, "e2e", sdkworker.Options{})
	w.RegisterWorkflowWithOptions(func(_ workflow.Context, in schemas.WorkflowInput) (map[string]any, error) {
		return map[string]any{"event_id": in.EventID, "data": in.Data}, nil
	}, workflow.RegisterOptions{Name: "RunActivityWorkflow"})
	if err := w.Start(); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(w.Stop)
}

// getStatus reads GET /v1/workflows/{id}.
func getStatus(t *testing.T, base, workflowID string, header ...string) (int, client.Status) {
	t.Helper()
	req, _ := http.NewRequest("GET", base+"/v1/workflows/"+workflowID, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = res.Body.Close() }()
	var st client.Status
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode == 200 {
		if err := json.Unmarshal(b, &st); err != nil {
			t.Fatalf("status body %s: %v", b, err)
		}
	}
	return res.StatusCode, st
}

// waitRun waits until the workflow has a run in Temporal and returns its
// status.
func waitRun(t *testing.T, base, workflowID string, header ...string) client.Status {
	t.Helper()
	var st client.Status
	if !eventually(time.Minute, func() bool {
		_, st = getStatus(t, base, workflowID, header...)
		return st.RunID != "" && st.Temporal != "" && st.Ledger == "started"
	}) {
		t.Fatalf("%s: no run after a minute: %+v", workflowID, st)
	}
	return st
}

// sendStatus is the HTTP status of a CloudEvents SDK send (0: no HTTP
// answer).
func sendStatus(res error) int {
	var hr *cehttp.Result
	if errors.As(res, &hr) {
		return hr.StatusCode
	}
	return 0
}

// The CloudEvents Go SDK as an HTTP client: the same event (one ID) sent
// twice in binary mode and once in structured mode is accepted each time
// and makes one execution; the Go client enqueueing the same key gets the
// same workflow ID and, once started, the same run ID; Result returns what
// the workflow returned.
func TestIngressSameKeyOneRun(t *testing.T) {
	e := newEnv(t, 1)
	e.resultWorker()
	cfg := e.config()
	r := e.startRouter(cfg)
	defer r.stop(t)
	in := e.startIngress(cfg, nil)

	ce, err := cloudevents.NewClientHTTP(cehttp.WithTarget(in.url + "/v1/events"))
	if err != nil {
		t.Fatal(err)
	}
	ev := cloudevents.NewEvent()
	ev.SetID("order-77")
	ev.SetType("order.created")
	ev.SetSource("shop")
	if err := ev.SetData(cloudevents.ApplicationJSON, map[string]any{"total": 77}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i, c := range []context.Context{ctx, ctx, cloudevents.WithEncodingStructured(ctx)} {
		if res := ce.Send(c, ev); !cloudevents.IsACK(res) || sendStatus(res) != http.StatusAccepted {
			t.Fatalf("send %d: %v (HTTP %d)", i, res, sendStatus(res))
		}
	}
	const wid = "activity-order-confirmation:order-77"
	st := waitRun(t, in.url, wid)

	// The Go client, with the routers' config: same IDs, same run.
	gc, err := dial.OpenClient(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()
	h, err := gc.Enqueue(ctx, client.Event{Type: "order.created", Source: "shop", IdempotencyKey: "order-77", Data: map[string]any{"total": 77}})
	if err != nil {
		t.Fatal(err)
	}
	if ids := h.WorkflowIDs(); len(ids) != 1 || ids[0] != wid {
		t.Fatalf("client workflow IDs %v", ids)
	}
	var out map[string]any
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := h.Result(rctx, &out); err != nil {
		t.Fatal(err)
	}
	if out["event_id"] != "order-77" || fmt.Sprint(out["data"]) != "map[total:77]" {
		t.Errorf("result %v", out)
	}
	sts, err := h.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if sts[0].RunID != st.RunID || sts[0].Temporal != "completed" || string(sts[0].Result) == "" {
		t.Errorf("client status %+v, ingress said run %s", sts[0], st.RunID)
	}
	// A second Enqueue after the start writes nothing and names the run.
	h2, err := gc.Enqueue(ctx, client.Event{Type: "order.created", Source: "shop", IdempotencyKey: "order-77", Data: map[string]any{"total": 77}})
	if err != nil || h2.Produced {
		t.Fatalf("repeat: %+v %v", h2, err)
	}
	if sts2, _ := h2.Status(ctx); sts2[0].RunID != st.RunID {
		t.Errorf("repeat's run %s, first %s", sts2[0].RunID, st.RunID)
	}
	if _, st2 := getStatus(t, in.url, wid); st2.Temporal != "completed" || string(st2.Result) == "" {
		t.Errorf("GET after completion: %+v", st2)
	}
	execs := e.executions(1)
	if len(execs) != 1 || execs[wid] != 1 {
		t.Errorf("executions %v, want one of %s", execs, wid)
	}
}

// One key, another payload, after the first started: 422, and the router
// records the conflict (dedup_conflicts, a dead letter); one execution,
// with the first payload.
func TestIngressConflictIs422(t *testing.T) {
	e := newEnv(t, 1)
	cfg := e.config()
	r := e.startRouter(cfg)
	defer r.stop(t)
	in := e.startIngress(cfg, nil)
	ce, err := cloudevents.NewClientHTTP(cehttp.WithTarget(in.url + "/v1/events"))
	if err != nil {
		t.Fatal(err)
	}
	ev := cloudevents.NewEvent()
	ev.SetID("order-5")
	ev.SetType("order.created")
	ev.SetSource("shop")
	_ = ev.SetData(cloudevents.ApplicationJSON, map[string]int{"total": 5})
	ctx := context.Background()
	if res := ce.Send(ctx, ev); sendStatus(res) != 202 {
		t.Fatalf("first: %v", res)
	}
	const wid = "activity-order-confirmation:order-5"
	waitRun(t, in.url, wid)
	_ = ev.SetData(cloudevents.ApplicationJSON, map[string]int{"total": 6})
	if res := ce.Send(ctx, ev); sendStatus(res) != http.StatusUnprocessableEntity {
		t.Fatalf("other payload: %v (HTTP %d), want 422", res, sendStatus(res))
	}
	if !eventually(30*time.Second, func() bool {
		c, err := e.led.Count(ctx)
		return err == nil && c.Conflicts == 1
	}) {
		t.Fatal("the router did not record the conflict")
	}
	e.waitCommitted(30 * time.Second)
	if got := e.dlqReasons(); got["conflict"] != 1 || len(got) != 1 {
		t.Errorf("dead letters %v, want one conflict", got)
	}
	if _, st := getStatus(t, in.url, wid); st.Conflicts != 1 || st.Ledger != "started" {
		t.Errorf("status %+v", st)
	}
	if in := e.workflowInput(wid); string(in.Data) != `{"total":5}` {
		t.Errorf("started with %s, want the first payload", in.Data)
	}
	if execs := e.executions(1); len(execs) != 1 {
		t.Errorf("executions %v", execs)
	}
}

// Concurrent requests with one key, to two ingress replicas: while the
// first is in flight (held after taking its lock) every other gets 409;
// then the first gets 202, and one execution starts.
func TestIngressConcurrentOneKey(t *testing.T) {
	e := newEnv(t, 1)
	cfg := e.config()
	r := e.startRouter(cfg)
	defer r.stop(t)
	held, hold := make(chan struct{}), make(chan struct{})
	var once sync.Once
	a := e.startIngress(cfg, func(string) { once.Do(func() { close(held); <-hold }) })
	b := e.startIngress(cfg, nil)
	body := `{"type":"order.created","total":3}`
	post := func(base string) int {
		req, _ := http.NewRequest("POST", base+"/v1/events", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", `"order-c1"`)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			return 0
		}
		_ = res.Body.Close()
		return res.StatusCode
	}
	first := make(chan int, 1)
	go func() { first <- post(a.url) }()
	// Bound: a minute for one request to reach its lock on a loaded
	// machine; a request answered before it held the key fails at once.
	select {
	case <-held:
	case c := <-first:
		t.Fatalf("the first request was answered %d before it held its key", c)
	case <-time.After(time.Minute):
		t.Fatal("the first request did not hold its key in a minute")
	}
	var wg sync.WaitGroup
	codes := make(chan int, 20)
	for i := 0; i < 20; i++ {
		wg.Add(1)
		base := a.url
		if i%2 == 1 {
			base = b.url
		}
		go func() { defer wg.Done(); codes <- post(base) }()
	}
	wg.Wait()
	close(codes)
	n409 := 0
	for c := range codes {
		if c == http.StatusConflict {
			n409++
		} else {
			t.Errorf("a request while the key was in flight got %d, want 409", c)
		}
	}
	close(hold)
	if c := <-first; c != http.StatusAccepted {
		t.Fatalf("first: %d", c)
	}
	t.Logf("one 202, %d 409s (10 from the other replica)", n409)
	const wid = "activity-order-confirmation:order-c1"
	waitRun(t, a.url, wid)
	e.waitCommitted(30 * time.Second)
	if execs := e.executions(1); len(execs) != 1 || execs[wid] != 1 {
		t.Errorf("executions %v", execs)
	}
	if got := counter(a.reg, "dedup_ingress_lock_degraded_total", "", ""); got != 0 {
		t.Errorf("%v requests locked per process only", got)
	}
}

// The CloudEvents Go SDK as a Kafka client (its sarama binding): binary-
// mode events whose data is text/plain and Protobuf bytes start with their
// bytes intact in the workflow input; a tombstone is skipped and counted.
func TestKafkaBinaryDataStartsIntact(t *testing.T) {
	e := newEnv(t, 1)
	sc := sarama.NewConfig()
	sc.Version = sarama.V3_0_0_0
	sender, err := kafka_sarama.NewSender(stack.Brokers(), sc, e.topic)
	if err != nil {
		t.Fatal(err)
	}
	ce, err := cloudevents.NewClient(sender)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sender.Close(context.Background()) }()
	proto := []byte{0x08, 0x96, 0x01, 0x12, 0x07, 't', 'e', 's', 't', 'i', 'n', 'g', 0x1a, 0x02, 0x00, 0xff}
	events := map[string]struct {
		ct   string
		data []byte
	}{"text-1": {"text/plain", []byte("hello, world\n")}, "proto-1": {"application/protobuf", proto}}
	ctx := context.Background()
	for id, d := range events {
		ev := cloudevents.NewEvent()
		ev.SetID(id)
		ev.SetType("order.created")
		ev.SetSource("shop")
		if err := ev.SetData(d.ct, d.data); err != nil {
			t.Fatal(err)
		}
		if res := ce.Send(ctx, ev); !cloudevents.IsACK(res) {
			t.Fatalf("%s: %v", id, res)
		}
	}
	if err := e.kcl.ProduceSync(ctx, &kgo.Record{Topic: e.topic, Key: []byte("gone"), Value: nil}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	r := e.startRouter(e.config())
	e.waitCommitted(time.Minute)
	r.stop(t)
	for id, d := range events {
		in := e.workflowInput("activity-order-confirmation:" + id)
		if !bytes.Equal(in.DataBase64, d.data) || in.DataContentType != d.ct || in.EventID != id {
			t.Errorf("%s: input data_base64 %q (%q), want %q (%q)", id, in.DataBase64, in.DataContentType, d.data, d.ct)
		}
	}
	if got := counter(r.reg, "dedup_records_tombstone_total", "", ""); got != 1 {
		t.Errorf("tombstones counted %v, want 1", got)
	}
	if got := e.dlqReasons(); len(got) != 0 {
		t.Errorf("dead letters %v, want none", got)
	}
	if execs := e.executions(2); len(execs) != 2 {
		t.Errorf("executions %v", execs)
	}
}

// curl against `dedup ingress` and `dedup run` as OS processes: a 202
// followed by a router crash (after its first claim, before any start)
// still starts the workflow, once, after the router restarts; the same key
// twice gets the same 202; oversized and malformed bodies get 413 and 400,
// a missing token 401, and write nothing.
func TestIngressCurlRouterCrashAfter202(t *testing.T) {
	e := newEnv(t, 1)
	cfg := e.config()
	tokens := e.t.TempDir() + "/tokens"
	if err := os.WriteFile(tokens, []byte(`tokens: [{tenant: shop, token: s3cret-0123456789, event_types: ["*"], routes: ["*"], read_status: true}]`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.Ingress.Listen = "127.0.0.1:0" // the port it binds is read from /proc (listen_test.go)
	cfg.Ingress.AdminListen = ""
	cfg.Ingress.TokensFile = tokens
	useTenantKeys(t, &cfg, e.t.TempDir())
	cfg.Ingress.MaxBodyBytes = 4096
	ing := exec.Command(dedupBin, "ingress", "--config", e.writeConfig(cfg))
	ing.Stdout, ing.Stderr = os.Stderr, os.Stderr
	if err := ing.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ing.Process.Signal(os.Interrupt); _ = waitExit(ing, 30*time.Second) }()
	listen, err := listenAddr(ing.Process.Pid, nil)
	if err != nil {
		t.Fatalf("dedup ingress: %v", err)
	}
	base := "http://" + listen
	curl := func(args ...string) (int, string) {
		t.Helper()
		out, err := exec.Command("curl", append([]string{"-sS", "-o", "-", "-w", "\n%{http_code}"}, args...)...).Output()
		if err != nil {
			t.Fatalf("curl %v: %v", args, err)
		}
		s := string(out)
		i := strings.LastIndex(s, "\n")
		var code int
		if _, err := fmt.Sscan(s[i+1:], &code); err != nil {
			t.Fatalf("curl %v: no status code after the body in %q: %v", args, s, err)
		}
		return code, s[:i]
	}
	auth := []string{"-H", "Authorization: Bearer s3cret-0123456789"}
	post := func(body string, extra ...string) (int, string) {
		return curl(append(append([]string{"-X", "POST", base + "/v1/events", "-H", "Content-Type: application/json", "--data-binary", body}, auth...), extra...)...)
	}
	ctx := context.Background()
	ends := func() int64 {
		o, err := e.adm.ListEndOffsets(ctx, e.topic)
		if err != nil {
			t.Fatal(err)
		}
		n := int64(0)
		for _, p := range o[e.topic] {
			n += p.Offset
		}
		return n
	}
	// Refused, nothing written.
	if code, body := post(`{"type":"order.created","pad":"`+strings.Repeat("x", 5000)+`"}`, "-H", `Idempotency-Key: "big"`); code != 413 || !strings.Contains(body, "oversized") {
		t.Errorf("oversized: %d %s", code, body)
	}
	if code, body := post(`{"type":"order.created",`, "-H", `Idempotency-Key: "bad"`); code != 400 || !strings.Contains(body, "undecodable") {
		t.Errorf("malformed: %d %s", code, body)
	}
	if code, _ := curl("-X", "POST", base+"/v1/events", "-H", "Content-Type: application/json", "--data-binary", `{"type":"order.created"}`, "-H", `Idempotency-Key: "x"`); code != 401 {
		t.Errorf("no token: %d", code)
	}
	if n := ends(); n != 0 {
		t.Fatalf("%d records written by refused requests", n)
	}

	// A router that crashes after its first claim.
	crashing := e.process(e.writeConfig(cfg), "DEDUP_FAILPOINT=after-claim:1")
	code1, body1 := post(`{"type":"order.created","total":42}`, "-H", `Idempotency-Key: "order-crash"`)
	code2, body2 := post(`{"type":"order.created","total":42}`, "-H", `Idempotency-Key: "order-crash"`)
	if code1 != 202 || code2 != 202 || body1 != body2 {
		t.Fatalf("two posts with one key: %d %s / %d %s", code1, body1, code2, body2)
	}
	var acc struct {
		EventID   string `json:"event_id"`
		Workflows []struct {
			WorkflowID string `json:"workflow_id"`
			StatusURL  string `json:"status_url"`
		} `json:"workflows"`
	}
	if err := json.Unmarshal([]byte(body1), &acc); err != nil || acc.EventID != "@shop/order-crash" || len(acc.Workflows) != 1 {
		t.Fatalf("202 body %s: %v", body1, err)
	}
	var exit *exec.ExitError
	if err := waitExit(crashing, 2*time.Minute); !errors.As(err, &exit) || exit.ExitCode() != 137 {
		t.Fatalf("router did not crash at the failpoint: %v", err)
	}
	wid := acc.Workflows[0].WorkflowID
	if _, st := getStatus(t, base, wid, "Authorization", "Bearer s3cret-0123456789"); st.Ledger != "pending" || st.RunID != "" {
		t.Fatalf("after the crash: %+v, want claimed and not started", st)
	}
	restarted := e.process(e.writeConfig(cfg))
	defer func() { _ = restarted.Process.Signal(os.Interrupt); _ = waitExit(restarted, time.Minute) }()
	st := waitRun(t, base, wid, "Authorization", "Bearer s3cret-0123456789")
	code, raw := curl(append([]string{base + acc.Workflows[0].StatusURL}, auth...)...)
	if code != 200 || !strings.Contains(raw, st.RunID) {
		t.Errorf("curl status: %d %s", code, raw)
	}
	e.waitCommitted(time.Minute)
	if execs := e.executions(1); len(execs) != 1 || execs[wid] != 1 {
		t.Errorf("executions %v", execs)
	}
	if in := e.workflowInput(wid); string(in.Data) != `{"type":"order.created","total":42}` || in.IDRule != "header" {
		t.Errorf("input %+v", in)
	}
}

// Two tenants post one Idempotency-Key over HTTP: two events, two
// workflows, two runs; each tenant reads its own status, and the other's
// workflow answers the 404 of one that does not exist.
func TestIngressTenantsOneKeyTwoWorkflows(t *testing.T) {
	e := newEnv(t, 1)
	cfg := e.config()
	tokens := e.t.TempDir() + "/tokens.yaml"
	if err := os.WriteFile(tokens, []byte(`tokens:
- {tenant: acme, token: acme-token-0123456789, event_types: ["order.*"], routes: ["*"], read_status: true}
- {tenant: globex, token: globex-token-0123456789, event_types: ["order.*"], routes: ["*"], read_status: true}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.Ingress.TokensFile = tokens
	useTenantKeys(t, &cfg, e.t.TempDir())
	r := e.startRouter(cfg)
	defer r.stop(t)
	in := e.startIngress(cfg, nil)
	post := func(token string) string {
		t.Helper()
		req, _ := http.NewRequest("POST", in.url+"/v1/events", strings.NewReader(`{"type":"order.created","total":123}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", `"order-123"`)
		req.Header.Set("Authorization", "Bearer "+token)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = res.Body.Close() }()
		var acc struct {
			Workflows []struct {
				WorkflowID string `json:"workflow_id"`
			} `json:"workflows"`
		}
		b, _ := io.ReadAll(res.Body)
		if res.StatusCode != 202 || json.Unmarshal(b, &acc) != nil || len(acc.Workflows) != 1 {
			t.Fatalf("%s: %d %s", token, res.StatusCode, b)
		}
		return acc.Workflows[0].WorkflowID
	}
	wa, wg := post("acme-token-0123456789"), post("globex-token-0123456789")
	if wa != "activity-order-confirmation:@acme/order-123" || wg != "activity-order-confirmation:@globex/order-123" {
		t.Fatalf("workflow IDs %s %s", wa, wg)
	}
	asA := []string{"Authorization", "Bearer acme-token-0123456789"}
	asG := []string{"Authorization", "Bearer globex-token-0123456789"}
	sa, sg := waitRun(t, in.url, wa, asA...), waitRun(t, in.url, wg, asG...)
	if sa.RunID == sg.RunID || sa.EventID != "@acme/order-123" || sg.EventID != "@globex/order-123" {
		t.Errorf("acme %+v; globex %+v", sa, sg)
	}
	if execs := e.executions(2); len(execs) != 2 {
		t.Errorf("executions %v, want 2", execs)
	}
	for _, c := range []struct {
		id   string
		auth []string
	}{{wg, asA}, {wa, asG}, {"activity-order-confirmation:@acme/never-sent", asA}} {
		if code, _ := getStatus(t, in.url, c.id, c.auth...); code != 404 {
			t.Errorf("%s as %s: %d, want 404", c.id, c.auth[1], code)
		}
	}
	e.waitCommitted(30 * time.Second)
}

// A producer that writes to Kafka directly cannot speak for a tenant: its
// records carrying dedup-tenant: acme, one unsigned and one with a made-up
// signature, are dead-lettered forged_tenant and claim nothing under acme's
// keys. acme's own request for the same key is then accepted (not the 422
// of a conflict with the forger's payload) and starts acme's payload, and
// acme's status endpoint knows nothing of the forged events.
func TestDirectProducerCannotImpersonateTenant(t *testing.T) {
	e := newEnv(t, 1)
	cfg := e.config()
	dir := e.t.TempDir()
	tokens := dir + "/tokens.yaml"
	if err := os.WriteFile(tokens, []byte(`tokens: [{tenant: acme, token: acme-token-0123456789, event_types: ["order.*"], routes: ["*"], read_status: true}]`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.Ingress.TokensFile = tokens
	useTenantKeys(t, &cfg, dir)
	r := e.startRouter(cfg)
	defer r.stop(t)
	in := e.startIngress(cfg, nil)

	forged := func(id, sig string) *kgo.Record {
		rec := &kgo.Record{Topic: e.topic, Key: []byte("@acme/" + id), Value: []byte(`{"total":666}`), Headers: []kgo.RecordHeader{
			{Key: "ce_specversion", Value: []byte("1.0")}, {Key: "ce_id", Value: []byte(id)}, {Key: "ce_type", Value: []byte("order.created")},
			{Key: "content-type", Value: []byte("application/json")}, {Key: "dedup-tenant", Value: []byte("acme")}}}
		if sig != "" {
			rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: "dedup-tenant-sig", Value: []byte(sig)})
		}
		return rec
	}
	ctx := context.Background()
	if err := e.kcl.ProduceSync(ctx, forged("k-9", ""), forged("k-10", "v1;kid=k1;AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	e.waitCommitted(time.Minute) // the router has decided both
	asAcme := []string{"Authorization", "Bearer acme-token-0123456789"}
	req, _ := http.NewRequest("POST", in.url+"/v1/events", strings.NewReader(`{"type":"order.created","total":9}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", `"k-9"`)
	req.Header.Set(asAcme[0], asAcme[1])
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	_ = res.Body.Close()
	if res.StatusCode != 202 {
		t.Fatalf("acme's own request for k-9 after a direct producer's forged @acme/k-9: %d %s, want 202", res.StatusCode, b)
	}
	const wid = "activity-order-confirmation:@acme/k-9"
	waitRun(t, in.url, wid, asAcme...)
	if got := e.workflowInput(wid); string(got.Data) != `{"type":"order.created","total":9}` {
		t.Errorf("acme's workflow started with %s, want acme's payload", got.Data)
	}
	if code, st := getStatus(t, in.url, "activity-order-confirmation:@acme/k-10", asAcme...); code != 404 {
		t.Errorf("acme's status shows the forged k-10 as its own: %d %+v", code, st)
	}
	if got := e.dlqReasons(); got["forged_tenant"] != 2 {
		t.Errorf("dead letters by reason %v, want the two forged records as forged_tenant", got)
	}
	if execs := e.executions(1); len(execs) != 1 {
		t.Errorf("executions %v, want acme's one", execs)
	}
}

// useTenantKeys gives cfg a tenant keyring in dir, which the ingress
// and the routers read.
func useTenantKeys(t *testing.T, cfg *config.Config, dir string) {
	t.Helper()
	path := dir + "/tenant-keys.yaml"
	if err := os.WriteFile(path, []byte("keys: [{id: k1, secret: "+testTenantSecret+"}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.Kafka.TenantKeysFile = path
}

// testTenantSecret is the tests' tenant key (32 bytes, base64).
const testTenantSecret = "dGVzdC10ZW5hbnQta2V5LTAxMjM0NTY3ODlhYmNkZWY="
