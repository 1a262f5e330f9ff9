package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dedupio/dedup/integration/devstack"
	"github.com/dedupio/dedup/internal/config"
	"github.com/dedupio/dedup/internal/demo/workload"
)

// Start-up with dependencies down (issue 20): `dedup run` (and `dedup
// worker`) started while Kafka, PostgreSQL or Temporal (or all three) are
// down must not exit: its admin port answers /livez at once and
// throughout, /readyz and dedup_dependency_up name what is missing, it
// logs one line per change of state, and it starts working within seconds
// of the dependency's return; in the end every event is started exactly
// once, and the worker started with Temporal down runs the workflows.
//
// How each dependency goes down: the broker is stopped and started again
// on its port with its data (devstack StopKafka / StartKafka); PostgreSQL
// is stopped with pg_ctl stop -m immediate and restarted; Temporal, whose
// embedded server keeps its state in memory and cannot restart, sits
// behind a devstack.Gate that refuses connections while closed.
//
// Each outage lasts outage (12s), longer than the rebalance timeout of
// e.config (10s): kfake restarts a rebalance's deadline on every JoinGroup
// (pkg/kfake/groups.go, rebalance()), so members that re-join faster than
// the rebalance timeout keep a group rebalancing on the test broker (real
// Kafka keeps the first deadline). Here each router joins once, after
// the dependencies are back, and the broker restarts once; keep any
// restart or re-join interval added to these scenarios above the
// rebalance timeout, or a stall will be the test broker's, not dedup's.

const outage = 12 * time.Second

// logBuffer keeps a process's log (JSON lines) for the test to read.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// count counts the log lines whose msg is msg and whose dependency is dep.
func (l *logBuffer) count(msg, dep string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	sc := bufio.NewScanner(bytes.NewReader(l.b.Bytes()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var line struct{ Msg, Dependency string }
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == msg && line.Dependency == dep {
			n++
		}
	}
	return n
}

// spawnLogged starts `dedup run` or `dedup worker` with cfg, on an admin
// port of its own, keeping its log (also copied to stderr).
func (e *env) spawnLogged(name, sub string, cfg config.Config) (*proc, *logBuffer) {
	e.t.Helper()
	admin := "127.0.0.1:0" // the port it binds is read from /proc (listen_test.go)
	if sub == "worker" {
		cfg.Worker.AdminListen = admin
	} else {
		cfg.Admin.Listen = admin
	}
	logs := &logBuffer{}
	p := &proc{name: name, admin: admin, done: make(chan struct{})}
	p.cmd = exec.Command(dedupBin, sub, "--config", e.writeConfig(cfg))
	p.cmd.Stdout, p.cmd.Stderr = os.Stderr, io.MultiWriter(os.Stderr, logs)
	e.startProc(p)
	return p, logs
}

// readyz returns /readyz's status code and body (0 when it does not answer).
func (p *proc) readyz() (int, string) {
	c := http.Client{Timeout: 4 * time.Second}
	resp, err := c.Get("http://" + p.admin + "/readyz")
	if err != nil {
		return 0, err.Error()
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// liveness polls /livez every 200ms from the process's start: the first
// 200 must come within 5s (exec, config, listen), and every answer after
// it must be a 200. stop returns what went wrong, if anything.
func liveness(p *proc) (stop func() []string) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan []string, 1)
	go func() {
		c := http.Client{Timeout: 2 * time.Second}
		began := time.Now()
		seen := false
		var problems []string
		for ctx.Err() == nil {
			code := 0
			if resp, err := c.Get("http://" + p.admin + "/livez"); err == nil {
				code = resp.StatusCode
				_ = resp.Body.Close()
			}
			switch {
			case code == 200:
				seen = true
			case !p.running():
				problems = append(problems, fmt.Sprintf("%s exited (%v)", p.name, p.err))
				done <- problems
				return
			case seen || time.Since(began) > 5*time.Second:
				problems = append(problems, fmt.Sprintf("%s: /livez answered %d at %s", p.name, code, time.Since(began).Round(time.Millisecond)))
			}
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
		done <- problems
	}()
	return func() []string { cancel(); return <-done }
}

// statusBody is the /readyz body for the given words.
func statusBody(words ...string) string {
	var b strings.Builder
	for i := 0; i+1 < len(words); i += 2 {
		fmt.Fprintf(&b, "%s: %s\n", words[i], words[i+1])
	}
	return b.String()
}

// awaitStatus waits until p's /readyz answers code and body.
func awaitStatus(t *testing.T, p *proc, timeout time.Duration, code int, body string) {
	t.Helper()
	var gotCode int
	var got string
	if !eventually(timeout, func() bool { gotCode, got = p.readyz(); return gotCode == code && got == body }) {
		t.Fatalf("%s /readyz: %d %q, want %d %q", p.name, gotCode, got, code, body)
	}
}

// startDown is one scenario: the dependencies in down are down when the
// routers (and, with worker, a worker) start, and come back one by one,
// in the order kafka, postgres, temporal are listed in down.
func startDown(t *testing.T, seed uint64, routers int, worker bool, down ...string) {
	if stack.Postgres == nil && strings.Contains(strings.Join(down, ","), "postgres") {
		t.Skip("DATABASE_URL given: the test cannot stop that server")
	}
	e := newEnv(t, 4)
	w := workload.Generate(workload.Spec{Partitions: 4, Records: 600, DupRatio: 0.3, CrossPartition: 0.1, Seed: seed,
		Topic: e.topic, IDPrefix: e.name + "-"})
	want := expectedWorkflows(w)
	half := len(w.Records) / 2
	e.produce(&workload.Workload{Records: w.Records[:half]})

	gate, err := devstack.NewGate(stack.Temporal.HostPort(), true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gate.Close)
	cfg := e.config()
	cfg.Temporal.HostPort = gate.Addr()
	cfg.Temporal.StartTimeout = 2 * time.Second
	cfg.Kafka.MaxPollRecords = 200
	cfg.Worker.TaskQueue = "e2e" // the routes' task queue
	cfg.Log.Level = "info"

	isDown := map[string]bool{}
	bringBack := func(d string) {
		t.Helper()
		var err error
		switch d {
		case "kafka":
			err = stack.StartKafka()
		case "postgres":
			err = stack.Postgres.Restart(context.Background())
		case "temporal":
			err = gate.Open()
		}
		if err != nil {
			t.Fatalf("bringing %s back: %v", d, err)
		}
		isDown[d] = false
	}
	// Whatever happens to the test, the shared stack is left up.
	t.Cleanup(func() {
		for _, d := range []string{"kafka", "postgres"} {
			if isDown[d] {
				bringBack(d)
			}
		}
	})
	for _, d := range down {
		var err error
		switch d {
		case "kafka":
			err = stack.StopKafka()
		case "postgres":
			err = stack.Postgres.StopImmediate()
		case "temporal":
			gate.Close()
		}
		if err != nil {
			t.Fatalf("stopping %s: %v", d, err)
		}
		isDown[d] = true
	}
	wentDown := time.Now()

	type started struct {
		p    *proc
		logs *logBuffer
		live func() []string
		deps []string
	}
	var procs []started
	for i := 0; i < routers; i++ {
		p, logs := e.spawnLogged(fmt.Sprintf("router-%d", i+1), "run", cfg)
		procs = append(procs, started{p, logs, liveness(p), []string{"kafka", "postgres", "temporal"}})
	}
	if worker {
		p, logs := e.spawnLogged("worker", "worker", cfg)
		procs = append(procs, started{p, logs, liveness(p), []string{"postgres", "temporal"}})
	}
	// body is what a process's /readyz says now.
	body := func(s started, self string) string {
		var words []string
		for _, d := range s.deps {
			words = append(words, d, map[bool]string{true: "down", false: "up"}[isDown[d]])
		}
		if s.p.name == "worker" {
			return statusBody(append(words, "worker", self)...)
		}
		return statusBody(append(words, "router", self)...)
	}
	for _, s := range procs {
		awaitStatus(t, s.p, 30*time.Second, 503, body(s, "starting"))
		for _, d := range s.deps {
			wantUp := map[bool]float64{true: 0, false: 1}[isDown[d]]
			if !eventually(10*time.Second, func() bool { return s.p.metric("dedup_dependency_up", "dependency", d) == wantUp }) {
				t.Errorf("%s: dedup_dependency_up{%s} = %v, want %v", s.p.name, d, s.p.metric("dedup_dependency_up", "dependency", d), wantUp)
			}
		}
	}
	time.Sleep(time.Until(wentDown.Add(outage)))
	// Back one at a time: until the last, every process still waits, and
	// says which dependency it still misses.
	order := []string{}
	for _, d := range []string{"kafka", "postgres", "temporal"} {
		if isDown[d] {
			order = append(order, d)
		}
	}
	for i, d := range order {
		bringBack(d)
		back := time.Now()
		if i == len(order)-1 {
			break
		}
		for _, s := range procs {
			awaitStatus(t, s.p, 30*time.Second, 503, body(s, "starting"))
		}
		t.Logf("%s back; the others still down, every process still waits (%s)", d, time.Since(back).Round(time.Millisecond))
		time.Sleep(3 * time.Second)
	}
	// Work begins within seconds: the waits back off up to retry.max (1s
	// in e.config); 15s leaves room for a loaded machine, not for a
	// crash loop's back-off.
	back := time.Now()
	for _, s := range procs {
		awaitStatus(t, s.p, 15*time.Second, 200, body(s, "running"))
		t.Logf("%s ready %s after the last dependency came back", s.p.name, time.Since(back).Round(time.Millisecond))
	}
	e.produce(&workload.Workload{Records: w.Records[half:]})
	e.waitCommitted(3 * time.Minute)
	if worker {
		var completed int
		if !eventually(3*time.Minute, func() bool {
			completed = 0
			for _, sts := range e.runsByStatus() {
				completed += strings.Count(sts, "completed")
			}
			return completed == want
		}) {
			t.Errorf("the worker completed %d workflows, want %d", completed, want)
		}
	}
	for _, s := range procs {
		for _, problem := range s.live() {
			t.Error(problem)
		}
		// One line per change of state: each dependency that was down is
		// logged down once and back once, however many attempts it took.
		for _, d := range s.deps {
			wasDown := strings.Contains(strings.Join(down, ","), d)
			downs, agains := s.logs.count("dependency down", d), s.logs.count("dependency answers again", d)
			if wasDown && (downs != 1 || agains != 1) || !wasDown && (downs != 0 || s.logs.count("dependency answers", d) != 1) {
				t.Errorf("%s: %s logged down %d times, back %d times (was down: %v)", s.p.name, d, downs, agains, wasDown)
			}
		}
		s.p.stop(t)
	}
	execs := e.checkExactlyOnce(w, want)
	if ok, state := e.committedAtEnd(); !ok {
		t.Errorf("committed offsets are not at the end: %s", state)
	}
	t.Logf("SCENARIO %s: down %v for %s; %d records, %d workflows, %d executions", t.Name(), down, outage, len(w.Records), want, execs)
}

func TestStartWithTemporalDown(t *testing.T) { startDown(t, 41, 1, true, "temporal") }

func TestStartWithPostgresDown(t *testing.T) { startDown(t, 42, 1, false, "postgres") }

func TestStartWithBrokersDown(t *testing.T) { startDown(t, 43, 1, false, "kafka") }

func TestStartWithEverythingDown(t *testing.T) {
	startDown(t, 44, 2, true, "kafka", "postgres", "temporal")
}

// What waiting does not heal ends the process, with the setting named:
// an unknown namespace (`dedup run` and `dedup worker`), a database that
// does not exist. The other dependencies answer meanwhile.
func TestStartRefusedExits(t *testing.T) {
	e := newEnv(t, 1)
	cases := []struct {
		sub  string
		cfg  func(*config.Config)
		want string
	}{
		{"run", func(c *config.Config) { c.Temporal.Namespace = "no-such-namespace" }, `temporal.namespace "no-such-namespace": no such namespace`},
		{"worker", func(c *config.Config) { c.Temporal.Namespace = "no-such-namespace" }, `temporal.namespace "no-such-namespace": no such namespace`},
		{"run", func(c *config.Config) { c.Postgres.URL = strings.Replace(e.dbURL, "/dedup_", "/no_such_", 1) }, "postgres.url: the database does not exist"},
	}
	if stack.Postgres == nil {
		cases = cases[:2] // DATABASE_URL given: its URL form is not ours to rewrite
	}
	for _, c := range cases {
		cfg := e.config()
		c.cfg(&cfg)
		p, logs := e.spawnLogged(c.sub, c.sub, cfg)
		code := p.wait(t, time.Minute)
		logs.mu.Lock()
		out := logs.b.String()
		logs.mu.Unlock()
		if code != 1 || !strings.Contains(out, "dedup "+c.sub+": "+c.want) {
			t.Errorf("dedup %s: exit %d, want 1 with %q; it said:\n%s", c.sub, code, c.want, out)
		}
	}
}
