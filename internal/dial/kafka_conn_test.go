package dial

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.temporal.io/sdk/client"

	"github.com/dedupio/dedup/connect/dialguard"
	"github.com/dedupio/dedup/internal/config"
	"github.com/dedupio/dedup/internal/testsupport/pgtest"
	"github.com/dedupio/dedup/internal/testsupport/testpki"
	"github.com/dedupio/dedup/internal/testsupport/tunnelkafka"
	"github.com/dedupio/dedup/processor"
	"github.com/dedupio/dedup/sink/ledger"
	"github.com/dedupio/dedup/sink/starter"
)

// secureKafka is a kfake broker that wants TLS with a client certificate
// and SASL (SCRAM-SHA-256 and PLAIN users), as a managed Kafka does.
type secureKafka struct {
	c          *kfake.Cluster
	dir        string
	caFile     string
	certFile   string
	keyFile    string
	handshakes atomic.Int64 // SASL handshakes the broker saw
}

const (
	scramUser, scramPass = "dedup-scram", "scr4m-pa$$word-7f3a"
	plainUser, plainPass = "dedup-plain", "pl4in-pa$word-91c2"
)

func startSecureKafka(t *testing.T) *secureKafka {
	t.Helper()
	ca := testpki.NewCA(t, "kafka-ca")
	srv := ca.Server(t, "127.0.0.1", "localhost")
	cli := ca.Client(t, "dedup")
	k := &secureKafka{dir: t.TempDir()}
	k.caFile = testpki.Write(t, k.dir, "ca.pem", ca.CertPEM)
	k.certFile = testpki.Write(t, k.dir, "client.pem", cli.CertPEM)
	k.keyFile = testpki.Write(t, k.dir, "client-key.pem", cli.KeyPEM)
	var err error
	k.c, err = kfake.NewCluster(kfake.NumBrokers(1),
		kfake.TLS(&tls.Config{Certificates: []tls.Certificate{srv.TLS(t)}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: ca.Pool()}),
		kfake.EnableSASL(),
		kfake.Superuser("SCRAM-SHA-256", scramUser, scramPass),
		kfake.Superuser("PLAIN", plainUser, plainPass),
		kfake.SeedTopics(1, "events", "events.dlq"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.c.Close)
	k.c.ControlKey(int16(kmsg.SASLHandshake), func(kmsg.Request) (kmsg.Response, error, bool) {
		k.c.KeepControl()
		k.handshakes.Add(1)
		return nil, nil, false
	})
	return k
}

// config is a router config for k, with kafka.tls and kafka.sasl as
// tlsYAML and saslYAML (flow mappings) say.
func (k *secureKafka) config(t *testing.T, tlsYAML, saslYAML string) config.Config {
	t.Helper()
	doc := fmt.Sprintf(`
kafka:
  brokers: [%s]
  group: g
  topics: [events]
  reset_offset: earliest
  no_route: dead_letter
  commit_interval: 100ms
  tls: %s
  sasl: %s
routes: [{id: a, match: {type: routed}, workflow_type: W, task_queue: q}]
postgres: {url: %q}
`, k.c.ListenAddrs()[0], tlsYAML, saslYAML, pgtest.NewDatabase(t))
	cfg, err := config.Parse([]byte(doc))
	if err != nil {
		t.Fatalf("%v\n%s", err, doc)
	}
	return cfg
}

func (k *secureKafka) mtls() string {
	return fmt.Sprintf("{ca_file: %s, cert_file: %s, key_file: %s}", k.caFile, k.certFile, k.keyFile)
}

// The consumer, the dead-letter producer (one client) and the admin
// client all connect over TLS with a client certificate and SASL, from the
// one kafka section: an unrouted event is dead-lettered (consumer and
// producer) and its offset committed, and kadm reads the committed offset
// and the topic's config (the replay-horizon check's request).
func TestKafkaOverTLSAndSASL(t *testing.T) {
	k := startSecureKafka(t)
	for _, tc := range []struct{ name, sasl string }{
		{"SCRAM-SHA-256", fmt.Sprintf("{mechanism: SCRAM-SHA-256, username: %s, password: %q}", scramUser, strings.ReplaceAll(scramPass, "$", "$$"))},
		{"PLAIN", fmt.Sprintf("{mechanism: plain, username: %s, password_file: %s}", plainUser, testpki.Write(t, k.dir, "plain-pass", []byte(plainPass+"\n")))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := k.config(t, k.mtls(), tc.sasl)
			cfg.Kafka.Group = "g-" + tc.name
			kopts, err := cfg.Kafka.ClientOpts()
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			log := slog.New(slog.NewTextHandler(io.Discard, nil))
			if err := CheckKafka(ctx, cfg, log, kopts); err != nil {
				t.Fatalf("start-up check: %v", err)
			}
			producer, err := kgo.NewClient(kopts...)
			if err != nil {
				t.Fatal(err)
			}
			defer producer.Close()
			value := fmt.Sprintf(`{"specversion":"1.0","id":"e-%s","type":"unrouted","source":"s","data":{}}`, tc.name)
			if err := producer.ProduceSync(ctx, &kgo.Record{Topic: "events", Value: []byte(value)}).FirstErr(); err != nil {
				t.Fatal(err)
			}
			end := runRouter(t, cfg)
			defer end()

			adm := kadm.NewClient(producer)
			waitFor(t, "the dead letter", func() bool {
				ends, err := adm.ListEndOffsets(ctx, "events.dlq")
				return err == nil && ends["events.dlq"][0].Offset >= 1
			})
			waitFor(t, "the committed offset", func() bool {
				offs, err := adm.FetchOffsets(ctx, cfg.Kafka.Group)
				o, ok := offs.Lookup("events", 0)
				return err == nil && ok && o.At >= 1
			})
			rcs, err := adm.DescribeTopicConfigs(ctx, "events")
			if err != nil || rcs[0].Err != nil {
				t.Fatalf("kadm describe configs: %v %v", err, rcs)
			}
		})
	}
}

// runRouter runs a router on cfg (processor.New applies its TLS and SASL), with a real
// ledger and a Temporal client that is never dialled (no route matches).
func runRouter(t *testing.T, cfg config.Config) (stop func()) {
	t.Helper()
	ctx := context.Background()
	if err := ledger.Migrate(ctx, cfg.Postgres.URL); err != nil {
		t.Fatal(err)
	}
	led, err := ledger.Open(ctx, cfg.Postgres)
	if err != nil {
		t.Fatal(err)
	}
	tc, err := client.NewLazyClient(client.Options{HostPort: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	r, err := processor.New(cfg.Kafka, processor.Options{Ledger: led, DeadLetterLog: led, Starter: starter.New(tc, cfg.Temporal),
		Registerer: prometheus.NewRegistry(), Log: log})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("router: %v", err)
		}
		led.Close()
		tc.Close()
	}
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s after 30s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A refused login or TLS handshake is a start-up error that names the
// broker and the setting, at once and after one attempt per seed broker:
// not a client retrying it for ever.
func TestKafkaRefusalsAreClearStartupErrors(t *testing.T) {
	k := startSecureKafka(t)
	other := testpki.NewCA(t, "someone-else")
	otherCA := testpki.Write(t, k.dir, "other-ca.pem", other.CertPEM)
	tokenServer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id, sec, _ := r.BasicAuth(); id != "dedup" || sec != "client-s3cret" {
			http.Error(w, `{"error":"invalid_client"}`, http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"access_token": "tok-1", "token_type": "Bearer", "expires_in": 3600})
	}))
	defer tokenServer.Close()
	broker := k.c.ListenAddrs()[0]
	scram := func(pass string) string {
		return fmt.Sprintf("{mechanism: SCRAM-SHA-256, username: %s, password: %q}", scramUser, pass)
	}
	for _, tc := range []struct {
		name, tls, sasl string
		want            []string
	}{
		{"wrong password", k.mtls(), scram("not-the-password"),
			[]string{"kafka.sasl: broker " + broker, "refused SCRAM-SHA-256 authentication", `user "` + scramUser + `"`}},
		{"wrong mechanism for the user", k.mtls(), fmt.Sprintf("{mechanism: SCRAM-SHA-512, username: %s, password: x}", scramUser),
			[]string{"kafka.sasl: broker " + broker, "refused SCRAM-SHA-512 authentication"}},
		{"OAUTHBEARER not enabled", k.mtls(), fmt.Sprintf("{mechanism: OAUTHBEARER, token_url: %s, client_id: dedup, client_secret: client-s3cret}", tokenServer.URL),
			[]string{"kafka.sasl: broker " + broker, "refused OAUTHBEARER authentication", `client "dedup"`}},
		{"another CA", fmt.Sprintf("{ca_file: %s, cert_file: %s, key_file: %s}", otherCA, k.certFile, k.keyFile), scram(scramPass),
			[]string{"kafka.tls: broker " + broker, "does not verify against kafka.tls.ca_file " + otherCA}},
		{"no client certificate", fmt.Sprintf("{ca_file: %s}", k.caFile), scram(scramPass),
			[]string{"kafka.tls: broker " + broker, "refused the TLS handshake", "client certificate"}},
		{"no TLS", "{}", scram(scramPass),
			[]string{"broker " + broker}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := k.config(t, tc.tls, tc.sasl)
			kopts, err := cfg.Kafka.ClientOpts()
			if err != nil {
				t.Fatal(err)
			}
			before := k.handshakes.Load()
			start := time.Now()
			err = CheckKafka(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), kopts)
			took := time.Since(start)
			if err == nil {
				t.Fatal("start-up check passed")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			// One seed broker: one connection, which franz-go retries
			// once on a new connection when the broker hangs up (kfake
			// closes the connection on a failed login where Kafka answers
			// SASL_AUTHENTICATION_FAILED): two SASL handshakes at most.
			if n := k.handshakes.Load() - before; n > 2 {
				t.Errorf("%d SASL handshakes for one seed broker, want at most 2", n)
			}
			if took > 5*time.Second {
				t.Errorf("took %s to fail, want it at once", took)
			}
			t.Logf("%s: %v", took.Round(time.Millisecond), err)
		})
	}
}

// tunnelConfig is a router config whose one seed is tk's loopback seed,
// with kafka.sasl PLAIN as tk's superuser, no TLS, and extra (more keys of
// the kafka section, a flow mapping's tail).
func tunnelConfig(t *testing.T, tk *tunnelkafka.Cluster, extra string) config.Config {
	t.Helper()
	doc := fmt.Sprintf(`
kafka: {brokers: [%q], group: g, topics: [events], reset_offset: earliest,
  sasl: {mechanism: PLAIN, username: %s, password: %q}%s}
routes: [{id: a, match: {type: routed}, workflow_type: W, task_queue: q}]
postgres: {url: "postgres://u@db.example.com/d?sslmode=verify-full"}
`, tk.Seed, plainUser, strings.ReplaceAll(plainPass, "$", "$$"), extra)
	cfg, err := config.Parse([]byte(doc))
	if err != nil {
		t.Fatalf("%v\n%s", err, doc)
	}
	return cfg
}

// A seed on this machine (an SSH tunnel, a port-forward) that advertises
// brokers off it does not get kafka.sasl's credentials sent to them in
// plaintext: every broker is checked at the dial, against the address
// dialled, and refused before a byte is sent, naming the broker and
// kafka.allow_insecure; the start-up check stops on it. With
// kafka.allow_insecure: true the same request reaches the broker (the
// control: the test sees such a connection).
func TestKafkaSASLNeverInPlaintextToAnAdvertisedRemoteBroker(t *testing.T) {
	tk := tunnelkafka.Start(t, kfake.EnableSASL(), kfake.Superuser("PLAIN", plainUser, plainPass), kfake.SeedTopics(1, "events"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	log := slog.New(slog.DiscardHandler)
	// askBroker asks the advertised broker itself for its API versions,
	// through a client with cfg's options.
	askBroker := func(cfg config.Config) error {
		t.Helper()
		kopts, err := cfg.Kafka.ClientOpts()
		if err != nil {
			t.Fatal(err)
		}
		cl, err := kgo.NewClient(kopts...)
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		if _, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl); err != nil {
			t.Fatalf("metadata from the seed %s: %v", tk.Seed, err)
		}
		_, err = cl.Broker(0).Request(ctx, kmsg.NewPtrApiVersionsRequest())
		return err
	}

	cfg := tunnelConfig(t, tk, "")
	err := askBroker(cfg)
	var refused *dialguard.RefusedError
	if !errors.As(err, &refused) || !strings.Contains(err.Error(), tk.Advertised) || !strings.Contains(err.Error(), "kafka.allow_insecure: true") {
		t.Errorf("a request to the advertised broker %s: %v, want a refusal naming it and kafka.allow_insecure", tk.Advertised, err)
	}
	kopts, err := cfg.Kafka.ClientOpts()
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckKafka(ctx, cfg, log, kopts); err == nil || !strings.Contains(err.Error(), tk.Advertised) {
		t.Errorf("start-up check: %v, want a refusal naming the advertised broker %s", err, tk.Advertised)
	}
	if n := tk.RemoteConns(); n != 0 {
		t.Fatalf("%d connections reached the broker at its advertised address %s with SASL and no TLS", n, tk.Advertised)
	}

	if err := askBroker(tunnelConfig(t, tk, ", allow_insecure: true")); err != nil {
		t.Fatalf("with kafka.allow_insecure: %v", err)
	}
	if tk.RemoteConns() == 0 {
		t.Fatal("with kafka.allow_insecure no connection reached the advertised address: the test cannot see one")
	}
}
