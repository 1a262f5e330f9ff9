package integration

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/server/common/dynamicconfig"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/dedupio/dedup/integration/devstack"
	"github.com/dedupio/dedup/internal/app"
	"github.com/dedupio/dedup/internal/config"
	"github.com/dedupio/dedup/internal/demo/workload"
	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/sink/ledger"
)

// One stack for the package: starting Temporal costs seconds. Tests keep
// apart by topic, group, database and Temporal namespace.
var (
	stack     *devstack.Stack
	faults    = &devstack.TemporalFaults{}
	dedupBin  string
	binDir    string // dedupBin's directory, and the skewed build's: removed after the tests
	nsCounter int
	nsMu      sync.Mutex
)

var namespaces = func() []string {
	// Every test env takes the next one (nsCounter); registered once at
	// start, as a new namespace takes the server a while to serve. Room
	// for the suite to grow: unused ones cost a registration each.
	var ns []string
	for i := 1; i <= 84; i++ {
		ns = append(ns, fmt.Sprintf("ns%d", i))
	}
	return ns
}()

func TestMain(m *testing.M) {
	os.Exit(func() int {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		kafkaDir, err := os.MkdirTemp("", "dedup-kafka-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer func() { _ = os.RemoveAll(kafkaDir) }()
		stack, err = devstack.Start(ctx, devstack.Config{Namespace: "default", DatabaseURL: os.Getenv("DATABASE_URL"), TemporalFaults: faults,
			TemporalDynamic: limitsDynamic(),
			KafkaDataDir:    kafkaDir})
		if err != nil {
			fmt.Fprintln(os.Stderr, "starting stack:", err)
			return 1
		}
		defer stack.Stop()
		for _, ns := range append(namespaces, nsSignalLimit, nsHistoryLimit) {
			if err := registerNamespace(ctx, ns); err != nil {
				fmt.Fprintln(os.Stderr, "registering namespace:", err)
				return 1
			}
		}
		for _, ns := range []string{nsBareOn, nsBareOff, nsBareAuto} {
			if err := registerBareNamespace(ctx, ns); err != nil {
				fmt.Fprintln(os.Stderr, "registering namespace:", err)
				return 1
			}
		}
		dir, err := os.MkdirTemp("", "dedup-bin-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer func() { _ = os.RemoveAll(dir) }()
		binDir, dedupBin = dir, filepath.Join(dir, "dedup")
		// -tags failpoints: the crash tests set DEDUP_FAILPOINT, which the
		// shipped binary refuses. -C ..: the root module's cmd/dedup, with
		// the root module's dependency versions, as shipped.
		build := exec.Command("go", "build", "-C", "..", "-tags", "failpoints", "-o", dedupBin, "./cmd/dedup")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "building dedup:", err)
			return 1
		}
		return m.Run()
	}())
}

// Two namespaces whose per-run limits are made small, for the tests of
// what dedup does when a run refuses a signal or a start by its limits
// (the server's defaults: 10,000 signals, 51,200 events, 2 MiB a payload).
const (
	nsSignalLimit  = "limit-signals" // 3 signals per run, 64 KiB per payload
	nsHistoryLimit = "limit-history" // 12 events per run
	// signalLimit is nsSignalLimit's history.maximumSignalsPerExecution.
	signalLimit = 3
)

func limitsDynamic() dynamicconfig.StaticClient {
	in := func(ns string, v any) []dynamicconfig.ConstrainedValue {
		return []dynamicconfig.ConstrainedValue{{Constraints: dynamicconfig.Constraints{Namespace: ns}, Value: v}}
	}
	return dynamicconfig.StaticClient{
		dynamicconfig.MaximumSignalsPerExecution.Key(): in(nsSignalLimit, signalLimit),
		dynamicconfig.BlobSizeLimitError.Key():         in(nsSignalLimit, 64*1024),
		dynamicconfig.BlobSizeLimitWarn.Key():          in(nsSignalLimit, 16*1024), // the error limit is checked above it only
		dynamicconfig.HistoryCountLimitError.Key():     in(nsHistoryLimit, 12),
		// The search-attribute tests add attributes while the server runs
		// (searchattrs_test.go): each start reads them afresh. Under this
		// suite's load that is safe; a benchmark's is not (devstack's
		// StartTemporal).
		dynamicconfig.ForceSearchAttributesCacheRefreshOnRead.Key(): []dynamicconfig.ConstrainedValue{{Value: true}},
	}
}

// newEnvIn is newEnv in namespace ns (one of the limits' namespaces).
func newEnvIn(t *testing.T, partitions int, ns string) *env {
	e := newEnv(t, partitions)
	e.namespace = ns
	var err error
	if e.tc, err = client.Dial(client.Options{HostPort: stack.Temporal.HostPort(), Namespace: ns, Logger: quietTemporalLogger()}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.tc.Close)
	return e
}

// registerNamespace registers ns with dedup's search attributes.
func registerNamespace(ctx context.Context, ns string) error {
	if err := registerBareNamespace(ctx, ns); err != nil {
		return err
	}
	return registerSearchAttributes(ctx, ns)
}

// registerBareNamespace registers ns without dedup's search attributes.
func registerBareNamespace(ctx context.Context, ns string) error {
	nc, err := client.NewNamespaceClient(client.Options{HostPort: stack.Temporal.HostPort()})
	if err != nil {
		return err
	}
	defer nc.Close()
	ret := 24 * time.Hour
	return nc.Register(ctx, &workflowservice.RegisterNamespaceRequest{Namespace: ns, WorkflowExecutionRetentionPeriod: durationpb.New(ret)})
}

// env is one test's slice of the stack.
type env struct {
	t         *testing.T
	name      string
	topic     string
	group     string
	namespace string
	dbURL     string
	adm       *kadm.Client
	kcl       *kgo.Client
	tc        client.Client
	led       *ledger.Postgres
	// beforeSpawn, when set, runs with the config of a process spawn
	// starts, just before it starts it.
	beforeSpawn func(config.Config)
}

func newEnv(t *testing.T, partitions int) *env {
	t.Helper()
	nsMu.Lock()
	if nsCounter == len(namespaces) {
		nsMu.Unlock()
		t.Fatal("out of namespaces: add one to the list")
	}
	ns := namespaces[nsCounter]
	nsCounter++
	nsMu.Unlock()
	ctx := context.Background()
	e := &env{t: t, name: strings.ToLower(t.Name()), namespace: ns}
	e.topic = "events-" + e.name
	e.group = "dedup-" + e.name
	var err error
	if e.kcl, err = kgo.NewClient(kgo.SeedBrokers(stack.Brokers()...), kgo.RecordPartitioner(kgo.ManualPartitioner())); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.kcl.Close)
	e.adm = kadm.NewClient(e.kcl)
	if _, err := e.adm.CreateTopics(ctx, int32(partitions), 1, nil, e.topic, e.topic+".dlq"); err != nil {
		t.Fatal(err)
	}
	dbName := strings.NewReplacer("/", "_", "-", "_").Replace("dedup_" + e.name)
	if stack.Postgres != nil {
		if e.dbURL, err = stack.Postgres.CreateDatabase(ctx, dbName); err != nil {
			t.Fatal(err)
		}
	} else {
		e.dbURL = stack.DatabaseURL // DATABASE_URL given: tests share it, told apart by workflow IDs
	}
	if err := ledger.Migrate(ctx, e.dbURL); err != nil {
		t.Fatal(err)
	}
	lc := ledger.DefaultConfig()
	lc.URL = e.dbURL
	if e.led, err = ledger.Open(ctx, lc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.led.Close)
	if e.tc, err = client.Dial(client.Options{HostPort: stack.Temporal.HostPort(), Namespace: ns, Logger: quietTemporalLogger()}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.tc.Close)
	return e
}

// config is a router config for this env: order.created to one activity,
// user.signed_up to two, audit.logged to none.
func (e *env) config() config.Config {
	cfg := config.Default()
	cfg.Kafka.Brokers = stack.Brokers()
	cfg.Kafka.Group = e.group
	cfg.Kafka.Topics = []string{e.topic}
	cfg.Kafka.ResetOffset = "earliest"
	cfg.Kafka.SessionTimeout = 6 * time.Second
	cfg.Kafka.RebalanceTimeout = 10 * time.Second
	cfg.Kafka.CommitInterval = 200 * time.Millisecond
	cfg.Kafka.MaxPollRecords = 500
	cfg.Retry.Max = time.Second
	cfg.Routes = decide.Routes{
		{ID: "order-confirmation", Match: decide.Match{Type: workload.TypeOrder}, WorkflowType: "RunActivityWorkflow", TaskQueue: "e2e"},
		{ID: "welcome-email", Match: decide.Match{Type: workload.TypeSignup}, WorkflowType: "RunActivityWorkflow", TaskQueue: "e2e"},
		{ID: "crm-sync", Match: decide.Match{Type: workload.TypeSignup}, WorkflowType: "RunActivityWorkflow", TaskQueue: "e2e", IDReusePolicy: decide.ReuseAllowDuplicateFailedOnly},
	}
	cfg.Postgres.URL = e.dbURL
	cfg.Temporal.HostPort = stack.Temporal.HostPort()
	cfg.Temporal.Namespace = e.namespace
	cfg.Admin.Listen = ""
	cfg.Worker.AdminListen = "" // tests run several workers on this host
	cfg.Log.Level = "warn"
	return cfg
}

// expectedWorkflows is how many workflows the routes make of w.
func expectedWorkflows(w *workload.Workload) int {
	return w.CountType(workload.TypeOrder) + 2*w.CountType(workload.TypeSignup)
}

func (e *env) produce(w *workload.Workload) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for i := 0; i < len(w.Records); i += 1000 {
		batch := w.Records[i:min(i+1000, len(w.Records))]
		for _, r := range batch {
			r.Topic = e.topic
		}
		if err := e.kcl.ProduceSync(ctx, batch...).FirstErr(); err != nil {
			e.t.Fatal(err)
		}
	}
}

// router is an in-process router.
type router struct {
	reg    *prometheus.Registry
	cancel context.CancelFunc
	done   chan error
}

func (e *env) startRouter(cfg config.Config) *router {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &router{reg: prometheus.NewRegistry(), cancel: cancel, done: make(chan error, 1)}
	ready := make(chan string, 1)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	go func() { r.done <- app.Run(ctx, cfg, app.Options{Logger: log, Registry: r.reg, Ready: ready}) }()
	select {
	case <-ready:
	case err := <-r.done:
		e.t.Fatalf("router exited at start: %v", err)
	case <-time.After(time.Minute):
		e.t.Fatal("router not up after a minute")
	}
	return r
}

func (r *router) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		if err != nil {
			t.Fatalf("router: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("router did not stop in a minute")
	}
}

// counter sums a counter's series with the given label value ("" for all).
func counter(reg *prometheus.Registry, name, label, value string) float64 {
	mfs, _ := reg.Gather()
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if label == "" || labelIs(m, label, value) {
				total += m.GetCounter().GetValue()
			}
		}
	}
	return total
}

func labelIs(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}

// waitCommitted waits until the group's committed offset of every partition
// of the topic equals its end offset.
func (e *env) waitCommitted(timeout time.Duration) {
	e.t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		if ok, state := e.committedAtEnd(); ok {
			return
		} else {
			last = state
		}
		time.Sleep(250 * time.Millisecond)
	}
	e.t.Fatalf("committed offsets did not reach the end offsets in %s: %s", timeout, last)
}

func (e *env) committedAtEnd() (bool, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ends, err := e.adm.ListEndOffsets(ctx, e.topic)
	if err != nil {
		return false, err.Error()
	}
	committed, err := e.adm.FetchOffsets(ctx, e.group)
	if err != nil {
		return false, err.Error()
	}
	ok := true
	var b strings.Builder
	ends.Each(func(o kadm.ListedOffset) {
		c, found := committed.Lookup(o.Topic, o.Partition)
		at := int64(-1)
		if found && c.Err == nil {
			at = c.At
		}
		fmt.Fprintf(&b, "p%d %d/%d ", o.Partition, at, o.Offset)
		if at != o.Offset {
			ok = false
		}
	})
	return ok, b.String()
}

// resetToEarliest commits offset 0 for every partition (the group must be
// empty), as `kafka-consumer-groups --reset-offsets --to-earliest` does.
func (e *env) resetToEarliest() {
	e.t.Helper()
	ctx := context.Background()
	starts, err := e.adm.ListStartOffsets(ctx, e.topic)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := e.adm.CommitAllOffsets(ctx, e.group, starts.Offsets()); err != nil {
		e.t.Fatal(err)
	}
	if ok, _ := e.committedAtEnd(); ok {
		e.t.Fatal("reset did not move the committed offsets")
	}
}

// executions counts the workflow executions of the env's namespace per
// workflow ID. Visibility is updated asynchronously, so it first waits (on
// the cheap count) until the total is at least want and stable, then lists
// every execution once.
func (e *env) executions(want int) map[string]int {
	e.t.Helper()
	ctx := context.Background()
	var prev int64 = -1
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		resp, err := e.tc.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{})
		if err != nil {
			e.t.Fatal(err)
		}
		if resp.Count >= int64(want) && resp.Count == prev {
			break
		}
		prev = resp.Count
	}
	counts, _ := e.listExecutions()
	return counts
}

func (e *env) listExecutions() (map[string]int, int) {
	e.t.Helper()
	counts := map[string]int{}
	total := 0
	for id, statuses := range e.runsByStatus() {
		counts[id] = strings.Count(statuses, ",") + 1
		total += counts[id]
	}
	return counts, total
}

// dlqReasons counts the dead-letter topic's records by reason header.
func (e *env) dlqReasons() map[string]int {
	e.t.Helper()
	out := map[string]int{}
	for _, r := range e.deadLetters() {
		for _, h := range r.Headers {
			if h.Key == "dedup-reason" {
				out[string(h.Value)]++
			}
		}
	}
	return out
}

// writeConfig writes cfg as a YAML file for a router process.
func (e *env) writeConfig(cfg config.Config) string {
	e.t.Helper()
	b, err := yaml.Marshal(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	// EventID and Routes are top-level sections, not kafka fields.
	path := filepath.Join(e.t.TempDir(), "dedup.yaml")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		e.t.Fatal(err)
	}
	if _, err := config.Load(path); err != nil {
		e.t.Fatalf("written config does not load: %v\n%s", err, b)
	}
	return path
}

// process runs `dedup run` as an OS process.
func (e *env) process(config string, extraEnv ...string) *exec.Cmd {
	e.t.Helper()
	cmd := exec.Command(dedupBin, "run", "--config", config)
	cmd.Env = append(os.Environ(), extraEnv...)
	cmd.Stdout, cmd.Stderr = io.Discard, os.Stderr
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	return cmd
}

func quietTemporalLogger() tlog.Logger {
	return tlog.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))
}
