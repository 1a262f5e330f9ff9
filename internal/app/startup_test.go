package app

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"go.temporal.io/api/serviceerror"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/dedupio/dedup/internal/config"
	"github.com/dedupio/dedup/internal/testsupport/pgtest"
	"github.com/dedupio/dedup/internal/testsupport/promtext"
	"github.com/dedupio/dedup/processor"
	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/sink/ledger"
)

// syncBuffer is a log sink tests read while the code under test writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func testLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func TestReadyText(t *testing.T) {
	deps := newDependencies(slog.New(slog.DiscardHandler), depKafka, depPostgres, depTemporal)
	deps.set(depKafka, nil)
	deps.set(depPostgres, errors.New("dial tcp 10.0.0.5:5432: connect: connection refused"))
	cases := []struct {
		name   string
		h      *processor.Health
		want   string
		wantOK bool
	}{
		{"starting", nil, "kafka: up\npostgres: down\ntemporal: unknown\nrouter: starting\n", false},
		{"joining", &processor.Health{}, "kafka: up\npostgres: down\ntemporal: unknown\nrouter: joining\n", false},
		{"paused on temporal", &processor.Health{InGroup: true, Down: []processor.Dependency{processor.DepTemporal}},
			"kafka: up\npostgres: down\ntemporal: down\nrouter: paused\n", false},
	}
	for _, c := range cases {
		got, ok := readyText(routerStatus(deps, c.h))
		if got != c.want || ok != c.wantOK {
			t.Errorf("%s: got %q %v, want %q %v", c.name, got, ok, c.want, c.wantOK)
		}
	}
	deps.set(depPostgres, nil)
	deps.set(depTemporal, nil)
	if got, ok := readyText(routerStatus(deps, &processor.Health{InGroup: true})); got != "kafka: up\npostgres: up\ntemporal: up\nrouter: running\n" || !ok {
		t.Errorf("all up: got %q %v", got, ok)
	}
	// The router holds Kafka down (dead-letter writes failing) while the
	// probe still reaches a broker: down wins.
	if got, ok := readyText(routerStatus(deps, &processor.Health{InGroup: true, Down: []processor.Dependency{processor.DepKafka}})); got != "kafka: down\npostgres: up\ntemporal: up\nrouter: paused\n" || ok {
		t.Errorf("router holds kafka down: got %q %v", got, ok)
	}
	wdeps := newDependencies(slog.New(slog.DiscardHandler), depPostgres, depTemporal)
	wdeps.set(depPostgres, nil)
	wdeps.set(depTemporal, nil)
	if got, ok := readyText(workerStatus(wdeps, false)); got != "postgres: up\ntemporal: up\nworker: starting\n" || ok {
		t.Errorf("worker starting: got %q %v", got, ok)
	}
	if got, ok := readyText(workerStatus(wdeps, true)); got != "postgres: up\ntemporal: up\nworker: running\n" || !ok {
		t.Errorf("worker running: got %q %v", got, ok)
	}
}

// The admin port: /livez and /healthz answer whatever the dependencies
// do; /readyz gives status words, never the error text, which goes to
// the log once per change of state.
func TestAdminPortHidesErrorText(t *testing.T) {
	var logs syncBuffer
	deps := newDependencies(testLogger(&logs), depPostgres, depTemporal)
	secret := `failed to connect to user=dedup_app database=orders: password authentication failed`
	reg := prometheus.NewRegistry()
	if err := reg.Register(deps); err != nil {
		t.Fatal(err)
	}
	srv, addr, err := serveAdmin("worker.admin_listen", "127.0.0.1:0", false, reg, slog.New(slog.DiscardHandler), func() []status { return workerStatus(deps, false) })
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Close() }()
	for i := 0; i < 3; i++ {
		deps.set(depPostgres, errors.New(secret))
	}
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, p := range []string{"/livez", "/healthz"} {
		if code, _ := get(p); code != 200 {
			t.Errorf("%s: %d, want 200 while dependencies are down", p, code)
		}
	}
	code, body := get("/readyz")
	if code != 503 || body != "postgres: down\ntemporal: unknown\nworker: starting\n" {
		t.Errorf("/readyz: %d %q", code, body)
	}
	if strings.Contains(body, "dedup_app") || strings.Contains(body, "password") {
		t.Errorf("/readyz leaks the error text: %q", body)
	}
	if n := strings.Count(logs.String(), "dependency down"); n != 1 || !strings.Contains(logs.String(), "password authentication failed") {
		t.Errorf("want the error logged once, got %d lines:\n%s", n, logs.String())
	}
	if v := promtext.Sum(addr, "dedup_dependency_up", "dependency", "postgres"); v != 0 {
		t.Errorf("dedup_dependency_up{postgres} = %v, want 0", v)
	}
	deps.set(depPostgres, nil)
	if v := promtext.Sum(addr, "dedup_dependency_up", "dependency", "postgres"); v != 1 {
		t.Errorf("dedup_dependency_up{postgres} = %v after it answered, want 1", v)
	}
}

// One log line per change of state, not one per attempt; a refusal ends
// the wait at once with the error naming the setting.
func TestWaitForLogsChangesOnly(t *testing.T) {
	var logs syncBuffer
	deps := newDependencies(testLogger(&logs), depTemporal)
	retry := processor.RetryConfig{Initial: time.Millisecond, Max: 2 * time.Millisecond}
	attempts := 0
	err := deps.waitFor(context.Background(), depTemporal, retry, refusedTemporal(config.Default()), func(context.Context) error {
		attempts++
		if attempts < 20 {
			return fmt.Errorf("failed reaching server: %w", serviceerror.NewUnavailable("connection refused"))
		}
		return nil
	})
	if err != nil || attempts != 20 {
		t.Fatalf("waitFor: %v after %d attempts", err, attempts)
	}
	out := logs.String()
	if strings.Count(out, "dependency down") != 1 || strings.Count(out, "dependency answers again") != 1 || strings.Count(out, "\n") != 2 {
		t.Errorf("want two lines (down, answers again), got:\n%s", out)
	}
	attempts = 0
	err = deps.waitFor(context.Background(), depTemporal, retry, refusedTemporal(config.Default()), func(context.Context) error {
		attempts++
		if attempts < 3 {
			return serviceerror.NewUnavailable("connection refused")
		}
		return serviceerror.NewNamespaceNotFound("default")
	})
	if err == nil || attempts != 3 || !strings.Contains(err.Error(), `temporal.namespace "default"`) {
		t.Errorf("a refusal: got %v after %d attempts, want an error naming temporal.namespace after 3", err, attempts)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(50 * time.Millisecond); cancel() }()
	err = deps.waitFor(ctx, depTemporal, retry, refusedTemporal(config.Default()), func(context.Context) error { return serviceerror.NewUnavailable("down") })
	if !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled wait: %v, want context.Canceled", err)
	}
}

// What waits and what exits (the runbook's "Start-up: what waits and what
// exits"): the exit errors name the setting to fix.
func TestRefusedOrWait(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: connection refused")}
	pg := func(code string) error {
		return fmt.Errorf("failed to connect to `user=u database=d`: %w", &pgconn.PgError{Code: code, Message: "x"})
	}
	x509Err := fmt.Errorf("tls: failed to verify certificate: %w", x509.UnknownAuthorityError{})
	cfg := config.Default()
	cfg.Temporal.HostPort, cfg.Temporal.Namespace = "temporal:7233", "orders"
	temporal := refusedTemporal(cfg)
	cases := []struct {
		dep     string
		err     error
		setting string // "" waits
	}{
		{"postgres", refused, ""},
		{"postgres", context.DeadlineExceeded, ""},
		{"postgres", pg("57P03"), ""}, // the database system is starting up
		{"postgres", pg("53300"), ""}, // too many connections
		{"postgres", pg("08006"), ""},
		// A failover or contention heals: a demoted primary or a standby
		// (read-only), a lock held by another replica's migration, a
		// shutdown, a serialization failure or a deadlock.
		{"postgres", pg("25006"), ""},
		{"postgres", fmt.Errorf("applying migrations: %w", pg("25006")), ""},
		{"postgres", pg("55P03"), ""},
		{"postgres", pg("57P01"), ""},
		{"postgres", pg("57P02"), ""},
		{"postgres", pg("40001"), ""},
		{"postgres", pg("40P01"), ""},
		{"postgres", pg("28P01"), "postgres.url: PostgreSQL refused the user or password"},
		{"postgres", pg("28000"), "postgres.url: PostgreSQL refused the user or password"},
		{"postgres", pg("3D000"), "postgres.url: the database does not exist"},
		{"postgres", fmt.Errorf("applying migrations: %w", pg("42501")), "postgres.url: the user lacks a privilege"},
		// A least-privilege role meeting a schema behind: ledger.Migrate's
		// error names `dedup migrate`, and is not told to grant DDL.
		{"postgres", fmt.Errorf("postgres.url: the ledger's schema is at version 6, this dedup needs 7, and postgres user %q may not change it (%w): run `dedup migrate` ...: %w",
			"router", ledger.ErrMayNotMigrate, pg("42501")), "postgres.url: the ledger's schema is at version 6"},
		{"postgres", pg("42P01"), "postgres: an error waiting does not fix"},
		{"postgres", x509Err, "postgres.url: the TLS handshake"},
		{"postgres", errors.New("server refused TLS connection"), "postgres.url: the TLS handshake"},

		{"temporal", fmt.Errorf("failed reaching server: %w", serviceerror.NewUnavailable("connection refused")), ""},
		{"temporal", fmt.Errorf("failed reaching server: %w", context.DeadlineExceeded), ""},
		{"temporal", serviceerror.NewResourceExhausted(0, "busy"), ""},
		{"temporal", serviceerror.NewNamespaceNotActive("orders", "a", "b"), ""},
		{"temporal", serviceerror.NewNamespaceUnavailable("orders"), ""},
		{"temporal", errors.New("EOF"), ""},
		{"temporal", fmt.Errorf("failed reaching server: %w", grpcstatus.Error(codes.Unauthenticated, "invalid API key")), "temporal.host_port temporal:7233: Temporal refused the client's credentials"},
		{"temporal", serviceerror.NewPermissionDenied("no", ""), `temporal.namespace "orders": permission denied`},
		{"temporal", fmt.Errorf("describing namespace orders: %w", serviceerror.NewNamespaceNotFound("orders")), `temporal.namespace "orders": no such namespace at temporal:7233`},
		{"temporal", serviceerror.NewUnavailable("connection error: desc = \"transport: authentication handshake failed: tls: failed to verify certificate: x509: certificate signed by unknown authority\""), "temporal.host_port temporal:7233: the TLS handshake"},
		{"temporal", serviceerror.NewUnavailable("connection error: desc = \"error reading server preface: remote error: tls: certificate required\""), "temporal.host_port temporal:7233: the TLS handshake"},
		{"temporal", serviceerror.NewInvalidArgument("bad"), `temporal.host_port temporal:7233, temporal.namespace "orders": Temporal refused for good`},
		// A proxy or ingress in front of Temporal is not Temporal: its 404
		// (gRPC Unimplemented) or a NotFound without Temporal's details
		// waits, as an unreachable Temporal does.
		{"temporal", fmt.Errorf("failed reaching server: %w", serviceerror.FromStatus(grpcstatus.New(codes.Unimplemented,
			"unexpected HTTP status code received from server: 404 (Not Found)"))), ""},
		{"temporal", fmt.Errorf("describing namespace orders: %w", serviceerror.FromStatus(grpcstatus.New(codes.NotFound, "no healthy upstream"))), ""},

		{"kafka", refused, ""},
		{"kafka", context.DeadlineExceeded, ""},
		{"kafka", kerr.NotLeaderForPartition, ""},
		{"kafka", kerr.CoordinatorNotAvailable, ""},
		{"kafka", errors.New("unable to dial: dial tcp 127.0.0.1:9092: connect: connection refused"), ""},
		{"kafka", fmt.Errorf("Authentication failed: Invalid username or password: %w", kerr.SaslAuthenticationFailed), "kafka.brokers: the brokers refused the SASL authentication"},
		{"kafka", kerr.UnsupportedSaslMechanism, "kafka.brokers: the brokers refused the SASL authentication"},
		{"kafka", fmt.Errorf("topic events: %w", kerr.TopicAuthorizationFailed), "kafka.topics: not authorized"},
		{"kafka", kerr.GroupAuthorizationFailed, "kafka.group: not authorized"},
		{"kafka", x509Err, "kafka.brokers: the TLS handshake"},
	}
	for _, c := range cases {
		var got error
		switch c.dep {
		case "postgres":
			got = refusedPostgres(c.err)
		case "temporal":
			got = temporal(c.err)
		case "kafka":
			got = refusedKafka(c.err)
		}
		switch {
		case c.setting == "" && got != nil:
			t.Errorf("%s %v: exits with %v, want it to wait", c.dep, c.err, got)
		case c.setting != "" && got == nil:
			t.Errorf("%s %v: waits, want it to exit naming %q", c.dep, c.err, c.setting)
		case c.setting != "" && !strings.HasPrefix(got.Error(), c.setting):
			t.Errorf("%s %v: exits with %q, want it to start with %q", c.dep, c.err, got, c.setting)
		case got != nil && !errors.Is(got, c.err):
			t.Errorf("%s %v: the exit error %v does not wrap the cause", c.dep, c.err, got)
		}
	}
}

// closedAddr is an address nothing listens on: connections are refused
// at once, as with a dependency that is down.
func closedAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

func unreachableConfig(t *testing.T) config.Config {
	cfg := config.Default()
	cfg.Kafka.Brokers = []string{closedAddr(t)}
	cfg.Kafka.Group, cfg.Kafka.Topics, cfg.Kafka.ResetOffset = "g", []string{"events"}, "earliest"
	cfg.Routes = decide.Routes{{ID: "a", Match: decide.Match{Type: "x"}, WorkflowType: "W", TaskQueue: "q"}}
	cfg.Postgres.URL = "postgres://postgres@" + closedAddr(t) + "/dedup?sslmode=disable"
	cfg.Temporal.HostPort = closedAddr(t)
	cfg.Admin.Listen = "127.0.0.1:0"
	cfg.Retry = processor.RetryConfig{Initial: 50 * time.Millisecond, Max: 500 * time.Millisecond}
	return cfg
}

// `dedup run` with every dependency down: the admin port answers at once,
// /readyz and dedup_dependency_up say what is missing, the log has one
// line per dependency (not one per attempt), and a signal still stops it
// cleanly.
func TestRunWaitsForEverythingDown(t *testing.T) {
	cfg := unreachableConfig(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Admin.Listen = l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg, Options{Logger: testLogger(&logs)}) }()
	c := http.Client{Timeout: time.Second}
	get := func(path string) (int, string) {
		resp, err := c.Get("http://" + cfg.Admin.Listen + path)
		if err != nil {
			return 0, err.Error()
		}
		defer func() { _ = resp.Body.Close() }()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	var live int
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if live, _ = get("/livez"); live == 200 {
			break
		}
	}
	if live != 200 {
		t.Fatal("/livez did not answer 200 within 5s of the start")
	}
	want := "kafka: down\npostgres: down\ntemporal: down\nrouter: starting\n"
	var code int
	var body string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if code, body = get("/readyz"); body == want {
			break
		}
	}
	if code != 503 || body != want {
		t.Fatalf("/readyz: %d %q, want 503 %q", code, body, want)
	}
	for _, d := range []string{"kafka", "postgres", "temporal"} {
		if v := promtext.Sum(cfg.Admin.Listen, "dedup_dependency_up", "dependency", d); v != 0 {
			t.Errorf("dedup_dependency_up{%s} = %v, want 0", d, v)
		}
	}
	if v := promtext.Sum(cfg.Admin.Listen, "dedup_ready", "", ""); v != 0 {
		t.Errorf("dedup_ready = %v, want 0", v)
	}
	time.Sleep(2 * time.Second) // several more attempts each (retry.max 500ms)
	if code, _ := get("/livez"); code != 200 {
		t.Errorf("/livez: %d during the wait", code)
	}
	if n := strings.Count(logs.String(), "dependency down"); n != 3 {
		t.Errorf("want one 'dependency down' line per dependency, got %d:\n%s", n, logs.String())
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Run after cancel: %v, want context.Canceled", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not return 15s after its context was cancelled")
	}
}

// A PostgreSQL that answers read-only (a standby, a primary that a
// failover demoted) is waited for at start-up, not refused: the failover
// ends and the migrations then apply. Real server: the database turns
// default_transaction_read_only on.
func TestStartupWaitsOnReadOnlyPostgres(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := pgtest.NewDatabase(t)
	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = admin.Close(ctx) }()
	db := pgx.Identifier{admin.Config().Database}.Sanitize()
	if _, err := admin.Exec(ctx, `ALTER DATABASE `+db+` SET default_transaction_read_only = on`); err != nil {
		t.Fatal(err)
	}
	err = ledger.Migrate(ctx, url)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "25006" {
		t.Fatalf("migrating a read-only database: %v, want SQLSTATE 25006", err)
	}
	if refused := refusedPostgres(err); refused != nil {
		t.Fatalf("start-up exits on a read-only PostgreSQL: %v, want it to wait", refused)
	}
	if _, err := admin.Exec(ctx, `ALTER DATABASE `+db+` RESET default_transaction_read_only`); err != nil {
		t.Fatal(err)
	}
	if err := ledger.Migrate(ctx, url); err != nil {
		t.Fatalf("migrating once the database takes writes again: %v", err)
	}
}

// What waiting does not heal ends Run with the setting named, even while
// the other dependencies are still down: a real PostgreSQL that does not
// know the database, or the user.
func TestRunExitsOnRefusal(t *testing.T) {
	c := pgtest.Cluster(t)
	cases := map[string]string{
		c.DatabaseURL("no_such_db"): "postgres.url: the database does not exist",
		strings.Replace(c.DatabaseURL("postgres"), "postgres@", "nobody@", 1): "postgres.url: PostgreSQL refused the user or password (SQLSTATE 28000",
	}
	for url, want := range cases {
		cfg := unreachableConfig(t)
		cfg.Postgres.URL = url
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := Run(ctx, cfg, Options{Logger: slog.New(slog.DiscardHandler)})
		cancel()
		if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%s: Run returned %v, want %q", url, err, want)
		}
	}
}

// Run registers dedup_dependency_up for the start-up, then hands the name
// over to the router: the registry accepts that only when both describe
// it alike.
func TestDependencyGaugeHandOver(t *testing.T) {
	reg := prometheus.NewRegistry()
	deps := newDependencies(slog.New(slog.DiscardHandler), depKafka, depPostgres, depTemporal)
	if err := reg.Register(deps); err != nil {
		t.Fatal(err)
	}
	if !reg.Unregister(deps) {
		t.Fatal("dedup_dependency_up not unregistered")
	}
	cfg := unreachableConfig(t)
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	r, err := processor.New(cfg.Kafka, processor.Options{Ledger: idle{}, DeadLetterLog: idle{}, Starter: idle{}, Registerer: reg,
		Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("the router cannot take dedup_dependency_up over: %v", err)
	}
	_ = r
}

// `dedup worker` with PostgreSQL and Temporal down: its own admin port
// (worker.admin_listen) answers at once and says what it waits for.
func TestRunWorkerWaitsForEverythingDown(t *testing.T) {
	cfg := unreachableConfig(t)
	cfg.Worker.AdminListen = closedAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- RunWorker(ctx, cfg, slog.New(slog.DiscardHandler)) }()
	c := http.Client{Timeout: time.Second}
	want := "postgres: down\ntemporal: down\nworker: starting\n"
	var code int
	var body string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && body != want; time.Sleep(50 * time.Millisecond) {
		if resp, err := c.Get("http://" + cfg.Worker.AdminListen + "/readyz"); err == nil {
			b, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			code, body = resp.StatusCode, string(b)
		}
	}
	if code != 503 || body != want {
		t.Fatalf("worker /readyz: %d %q, want 503 %q", code, body, want)
	}
	if resp, err := c.Get("http://" + cfg.Worker.AdminListen + "/livez"); err != nil || resp.StatusCode != 200 {
		t.Errorf("worker /livez: %v %v", resp, err)
	} else {
		_ = resp.Body.Close()
	}
	for _, m := range []struct {
		name, label, value string
		want               float64
	}{{"dedup_dependency_up", "dependency", "postgres", 0}, {"dedup_dependency_up", "dependency", "temporal", 0}, {"dedup_worker_ready", "", "", 0}, {"dedup_build_info", "", "", 1}} {
		if v := promtext.Sum(cfg.Worker.AdminListen, m.name, m.label, m.value); v != m.want {
			t.Errorf("%s{%s=%q} = %v, want %v", m.name, m.label, m.value, v, m.want)
		}
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("RunWorker after cancel: %v, want context.Canceled", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("RunWorker did not return 15s after its context was cancelled")
	}
}

// idle is a ledger, dead-letter log and starter that is never called: a
// router that is only created, never run.
type idle struct{}

func (idle) Claim(context.Context, []decide.Intent) ([]decide.Claimed, error) {
	return nil, errors.New("idle")
}
func (idle) MarkStarted(context.Context, []processor.Started) error { return errors.New("idle") }
func (idle) MarkDeadLettered(context.Context, []processor.DeadLettered) error {
	return errors.New("idle")
}
func (idle) Own(_ context.Context, o processor.Ownership) ([]int64, error) {
	epochs := make([]int64, len(o.Parts))
	for i := range epochs {
		epochs[i] = 1
	}
	return epochs, nil
}
func (idle) Written(context.Context, []processor.DeadLetter) ([]bool, error) {
	return nil, errors.New("idle")
}
func (idle) Record(context.Context, []processor.DeadLetter) error { return errors.New("idle") }
func (idle) Start(context.Context, decide.StartRequest) (processor.StartResult, error) {
	return processor.StartResult{}, errors.New("idle")
}
func (idle) LastRun(context.Context, string, string) (decide.Run, error) {
	return decide.Run{}, errors.New("idle")
}
