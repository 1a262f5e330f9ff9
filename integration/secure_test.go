package integration

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.temporal.io/sdk/client"
	temporalsrv "go.temporal.io/server/temporal"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/dedupio/dedup/connect/secretfile"
	"github.com/dedupio/dedup/integration/devstack"
	"github.com/dedupio/dedup/internal/app"
	dedupconfig "github.com/dedupio/dedup/internal/config"
	"github.com/dedupio/dedup/internal/testsupport/testpki"
)

// syncBuffer is a log sink several goroutines write to.
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

// Everything as a managed deployment has it: Kafka over TLS with
// SCRAM-SHA-512, Temporal over mutual TLS (the in-process server's own
// TLS config, requireClientAuth) with an API key, two routes in two
// namespaces, and the secrets in files and environment variables. The
// router starts each route's workflow in its namespace, and its logs, at
// debug level, never carry a secret. Without a client certificate, or
// against another CA, dedup run fails at start with an error naming
// temporal.tls.
func TestSecureConnections(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.NewCA(t, "secure-ca")
	srv := ca.Server(t, "127.0.0.1", "localhost")
	cli := ca.Client(t, "dedup")
	sys := ca.Client(t, "temporal-system-worker")
	w := func(name string, b []byte) string { return testpki.Write(t, dir, name, b) }
	caFile := w("ca.pem", ca.CertPEM)
	srvCert, srvKey := w("server.pem", srv.CertPEM), w("server-key.pem", srv.KeyPEM)
	cliCert, cliKey := w("client.pem", cli.CertPEM), w("client-key.pem", cli.KeyPEM)

	// The frontend records the API key each start carries (the
	// in-process server has no authorizer that would check it).
	var authMu sync.Mutex
	startKeys := map[string]int{}
	recordKey := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if strings.HasSuffix(info.FullMethod, "/StartWorkflowExecution") {
			md, _ := metadata.FromIncomingContext(ctx)
			authMu.Lock()
			for _, v := range md.Get("authorization") {
				startKeys[v]++
			}
			authMu.Unlock()
		}
		return handler(ctx, req)
	}
	sawKey := func(k string) bool { authMu.Lock(); defer authMu.Unlock(); return startKeys["Bearer "+k] > 0 }
	temporal, err := devstack.StartTemporal(devstack.TemporalConfig{
		Namespaces:   []string{"secure-a", "secure-b"},
		ExtraOptions: []temporalsrv.ServerOption{temporalsrv.WithChainedFrontendGrpcInterceptors(recordKey)},
		TLS: &devstack.TemporalTLS{CertFile: srvCert, KeyFile: srvKey, ClientCAFile: caFile,
			WorkerCertFile: w("sys.pem", sys.CertPEM), WorkerKeyFile: w("sys-key.pem", sys.KeyPEM), CAFile: caFile, ServerName: "localhost"},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = temporal.Stop() }()

	const (
		kafkaPassword = "kafka-Pa55-$ecret-4e1d"
		apiKey        = "tmprl-api-key-8c1b2f90"
		pgPassword    = "pg-Pa55-secret-77aa"
	)
	kc, err := kfake.NewCluster(kfake.NumBrokers(1),
		kfake.TLS(&tls.Config{Certificates: []tls.Certificate{srv.TLS(t)}}),
		kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-512", "dedup", kafkaPassword),
		kfake.SeedTopics(1, "secure-events", "secure-events.dlq"))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()

	dbURL := stack.DatabaseURL
	if stack.Postgres != nil {
		if dbURL, err = stack.Postgres.CreateDatabase(context.Background(), "dedup_secure"); err != nil {
			t.Fatal(err)
		}
		// Trust authentication takes any password: it is here to be
		// kept out of the logs.
		dbURL = strings.Replace(dbURL, "postgres://postgres@", "postgres://postgres:"+pgPassword+"@", 1)
	}
	t.Setenv("DEDUP_TEST_TEMPORAL_API_KEY", apiKey)
	config := func(temporalTLS, apiKey string) string {
		return fmt.Sprintf(`
kafka:
  brokers: [%s]
  group: secure
  topics: [secure-events]
  reset_offset: earliest
  tls: {ca_file: %s}
  sasl: {mechanism: SCRAM-SHA-512, username: dedup, password_file: %s}
routes:
  - {id: r-a, match: {type: order.created}, workflow_type: RunActivityWorkflow, task_queue: q}
  - {id: r-b, match: {type: order.created}, workflow_type: RunActivityWorkflow, task_queue: q, namespace: secure-b}
postgres:
  url_file: %s
temporal:
  host_port: %s
  namespace: secure-a
  tls: %s
  %s
admin: {listen: ""}
log: {level: debug}
`, kc.ListenAddrs()[0], caFile, w("kafka-password", []byte(kafkaPassword+"\n")), w("pg-url", []byte(dbURL)),
			temporal.HostPort(), temporalTLS, apiKey)
	}
	mtls := fmt.Sprintf("{ca_file: %s, cert_file: %s, key_file: %s, server_name: localhost}", caFile, cliCert, cliKey)
	const apiKeyEnv = "api_key: ${DEDUP_TEST_TEMPORAL_API_KEY}"
	cfg, err := dedupconfig.Parse([]byte(config(mtls, apiKeyEnv)))
	if err != nil {
		t.Fatal(err)
	}

	logs := &syncBuffer{}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx, cancel := context.WithCancel(context.Background())
	done, ready := make(chan error, 1), make(chan string, 1)
	go func() { done <- app.Run(ctx, cfg, app.Options{Logger: log, Ready: ready}) }()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("router exited at start: %v\n%s", err, logs)
	case <-time.After(time.Minute):
		t.Fatal("router not up after a minute")
	}
	kopts, err := cfg.Kafka.ClientOpts()
	if err != nil {
		t.Fatal(err)
	}
	producer, err := kgo.NewClient(kopts...)
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	event := `{"specversion":"1.0","id":"evt-1","type":"order.created","source":"shop","data":{"order":1}}`
	if err := producer.ProduceSync(context.Background(), &kgo.Record{Topic: "secure-events", Value: []byte(event)}).FirstErr(); err != nil {
		t.Fatal(err)
	}

	// Each route's workflow, in its namespace only.
	described := func(ns, wid string) error {
		c, err := client.Dial(client.Options{HostPort: temporal.HostPort(), Namespace: ns, Logger: quietTemporalLogger(),
			ConnectionOptions: client.ConnectionOptions{TLS: &tls.Config{Certificates: []tls.Certificate{cli.TLS(t)}, RootCAs: ca.Pool(), ServerName: "localhost"}}})
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.DescribeWorkflowExecution(context.Background(), wid, "")
		return err
	}
	if !eventually(time.Minute, func() bool {
		return described("secure-a", "activity-r-a:evt-1") == nil && described("secure-b", "activity-r-b:evt-1") == nil
	}) {
		t.Fatalf("workflows not started in their namespaces: %v, %v", described("secure-a", "activity-r-a:evt-1"), described("secure-b", "activity-r-b:evt-1"))
	}
	if err := described("secure-a", "activity-r-b:evt-1"); err == nil {
		t.Error("route r-b's workflow started in the default namespace too")
	}
	if !sawKey(apiKey) {
		t.Errorf("the starts did not carry the API key: %v", startKeys)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("router: %v", err)
	}
	out := logs.String()
	if !strings.Contains(out, "router running") {
		t.Fatalf("no logs captured:\n%s", out)
	}
	for name, s := range map[string]string{"kafka password": kafkaPassword, "API key": apiKey, "postgres password": pgPassword,
		"a private key": "PRIVATE KEY", "the client key": string(cli.KeyPEM[40:80])} {
		if strings.Contains(out, s) {
			t.Errorf("the logs carry %s", name)
		}
	}
	t.Logf("%d bytes of debug logs, no secret in them", len(out))

	// The same as `dedup run` (the binary, its stderr), with the API key
	// in a file that is rotated while it runs: a run that starts
	// workflows with the first key, then with the second; then one whose
	// Kafka password is wrong and which exits on it.
	const apiKey2 = "tmprl-api-key-rotated-5d09"
	secrets := map[string]string{"kafka password": kafkaPassword, "API key": apiKey, "rotated API key": apiKey2,
		"postgres password": pgPassword, "wrong password": "wr0ng-Pa55-9d2e"}
	keyFile := w("api-key", []byte(apiKey+"\n"))
	doc := strings.Replace(config(mtls, "api_key_file: "+keyFile), "group: secure", "group: secure-process", 1)
	produce := func(id string) {
		event := fmt.Sprintf(`{"specversion":"1.0","id":%q,"type":"order.created","source":"shop","data":{}}`, id)
		if err := producer.ProduceSync(context.Background(), &kgo.Record{Topic: "secure-events", Value: []byte(event)}).FirstErr(); err != nil {
			t.Error(err)
		}
	}
	stderr, err := runProcess(t, w("dedup.yaml", []byte(doc)), func() bool {
		produce("evt-2")
		if !eventually(time.Minute, func() bool { return described("secure-b", "activity-r-b:evt-2") == nil }) {
			return false
		}
		w("api-key", []byte(apiKey2+"\n"))
		time.Sleep(secretfile.StatInterval) // the next look at the key file
		produce("evt-3")
		return eventually(time.Minute, func() bool { return described("secure-b", "activity-r-b:evt-3") == nil })
	})
	if err != nil {
		t.Errorf("dedup run: %v\n%s", err, stderr)
	}
	if described("secure-b", "activity-r-b:evt-3") != nil {
		t.Errorf("dedup run did not start the workflows:\n%s", stderr)
	}
	if !sawKey(apiKey2) {
		t.Errorf("after the key file was rotated, no start carried the new key: %v", startKeys)
	}
	wrong := strings.Replace(doc, "password_file: "+w("kafka-password", []byte(kafkaPassword+"\n")), "password: "+secrets["wrong password"], 1)
	stderr2, err := runProcess(t, w("wrong.yaml", []byte(wrong)), nil)
	if err == nil || !strings.Contains(stderr2, "refused SCRAM-SHA-512 authentication") {
		t.Errorf("dedup run with a wrong Kafka password: %v\n%s", err, stderr2)
	}
	for name, s := range secrets {
		if strings.Contains(stderr+stderr2, s) {
			t.Errorf("dedup run's stderr carries the %s", name)
		}
	}
	t.Logf("dedup run: %d bytes of stderr, then with a wrong password: %s", len(stderr), strings.TrimSpace(stderr2))

	for _, tc := range []struct{ name, tls, want string }{
		{"no client certificate", fmt.Sprintf("{ca_file: %s, server_name: localhost}", caFile), "temporal.tls: the server refused the TLS handshake (remote error: tls: certificate required): it wants a client certificate"},
		{"another CA", fmt.Sprintf("{ca_file: %s, cert_file: %s, key_file: %s, server_name: localhost}",
			w("other-ca.pem", testpki.NewCA(t, "other").CertPEM), cliCert, cliKey), "temporal.tls: the server's certificate does not verify against temporal.tls.ca_file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := dedupconfig.Parse([]byte(config(tc.tls, apiKeyEnv)))
			if err != nil {
				t.Fatal(err)
			}
			cfg.Kafka.Group = "secure-" + strings.ReplaceAll(tc.name, " ", "-")
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			start := time.Now()
			err = app.Run(ctx, cfg, app.Options{Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))})
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), temporal.HostPort()) {
				t.Fatalf("got %v, want an error naming %s and %s", err, temporal.HostPort(), tc.want)
			}
			t.Logf("after %s: %v", time.Since(start).Round(time.Millisecond), err)
		})
	}
}

// runProcess runs `dedup run --config path` until until (if not nil)
// returns, then stops it with SIGTERM; without until, it waits for the
// process to exit by itself. It returns the process's stderr.
func runProcess(t *testing.T, path string, until func() bool) (string, error) {
	t.Helper()
	cmd := exec.Command(dedupBin, "run", "--config", path)
	var stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	if until != nil {
		until()
		_ = cmd.Process.Signal(syscall.SIGTERM)
	}
	select {
	case err := <-done:
		return stderr.String(), err
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		return stderr.String(), fmt.Errorf("dedup run did not exit within a minute")
	}
}
