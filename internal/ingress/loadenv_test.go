package ingress

// The load test's surroundings: the dedup binary, an in-process Kafka
// (kfake) that can hold one produce request on demand, a throwaway
// PostgreSQL, and `dedup ingress` processes on loopback ports (no
// Temporal: the ingress dials it lazily, and POST never needs it).

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.yaml.in/yaml/v3"

	"github.com/dedupio/dedup/internal/config"
	"github.com/dedupio/dedup/internal/testsupport/pgtest"
	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/sink/ledger"
)

// buildDedup builds cmd/dedup into dir.
func buildDedup(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "dedup")
	t0 := time.Now()
	out, err := exec.Command("go", "build", "-o", bin, "github.com/dedupio/dedup/cmd/dedup").CombinedOutput()
	if err != nil {
		t.Fatalf("go build ./cmd/dedup: %v\n%s", err, out)
	}
	t.Logf("built dedup in %s", time.Since(t0).Round(time.Millisecond))
	return bin
}

// Kafka's layout for the load test: two brokers, the topic's partition
// holdPartition led by broker holdNode and the other by the other broker,
// so that holding a produce request to holdNode holds the records of
// holdPartition only (franz-go sends a broker only its leaders'
// partitions).
const (
	loadTopic     = "events"
	holdPartition = 0
	holdNode      = 0
)

// partitionOf is the partition the ingress's producer writes key to: the
// record key is the event ID and the partitioner franz-go's default
// (murmur2 of the key, as Kafka's Java client).
func partitionOf(key string) int {
	return kgo.StickyKeyPartitioner(nil).ForTopic(loadTopic).Partition(&kgo.Record{Key: []byte(key)}, 2)
}

// loadKafka is a kfake cluster whose next produce request to holdNode can
// be held until released.
type loadKafka struct {
	*kfake.Cluster
	armed atomic.Pointer[heldProduce]
}

type heldProduce struct {
	held    chan struct{} // closed when the request arrived and is held
	release chan struct{} // close to let it through
}

func newLoadKafka(t *testing.T) *loadKafka {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(2), kfake.SeedTopics(2, loadTopic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	if err := c.MoveTopicPartition(loadTopic, holdPartition, holdNode); err != nil {
		t.Fatal(err)
	}
	if err := c.MoveTopicPartition(loadTopic, 1-holdPartition, 1-holdNode); err != nil {
		t.Fatal(err)
	}
	k := &loadKafka{Cluster: c}
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		if c.CurrentNode() != holdNode {
			return nil, nil, false
		}
		h := k.armed.Swap(nil)
		if h == nil {
			return nil, nil, false
		}
		close(h.held)
		c.SleepControl(func() { <-h.release })
		return nil, nil, false // then handled as usual
	})
	return k
}

// hold arms the hold of the next produce request to holdNode.
func (k *loadKafka) hold() *heldProduce {
	h := &heldProduce{held: make(chan struct{}), release: make(chan struct{})}
	k.armed.Store(h)
	return h
}

// written is how many records the topic holds.
func (k *loadKafka) written(t *testing.T) int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, loadTopic)
	if err != nil {
		t.Fatal(err)
	}
	n := int64(0)
	ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
	return n
}

// loadEnv is what the ingress processes share.
type loadEnv struct {
	t     *testing.T
	bin   string
	kafka *loadKafka
	dbURL string
}

func newLoadEnv(t *testing.T) *loadEnv {
	t.Helper()
	e := &loadEnv{t: t, bin: buildDedup(t, t.TempDir()), kafka: newLoadKafka(t), dbURL: pgtest.NewDatabase(t)}
	if err := ledger.Migrate(context.Background(), e.dbURL); err != nil {
		t.Fatal(err)
	}
	return e
}

// noCollisions fails the test if two of keys share a 32-bit hashtext (an
// advisory lock): such keys would make a spurious 409 when both are in
// flight, a race the test would then depend on.
func (e *loadEnv) noCollisions(keys []string) {
	e.t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, e.dbURL)
	if err != nil {
		e.t.Fatal(err)
	}
	defer func() { _ = c.Close(ctx) }()
	var dup int
	if err := c.QueryRow(ctx, `SELECT count(*) - count(DISTINCT hashtext(k)) FROM unnest($1::text[]) k`, keys).Scan(&dup); err != nil {
		e.t.Fatal(err)
	}
	if dup > 0 {
		e.t.Fatalf("%d of the %d keys share an advisory lock hash with another: choose other keys", dup, len(keys))
	}
}

// config is an ingress config on free loopback ports.
func (e *loadEnv) config(maxBody int) config.Config {
	cfg := config.Default()
	cfg.Kafka.Brokers = e.kafka.ListenAddrs()
	cfg.Kafka.Group = "dedup"
	cfg.Kafka.ResetOffset = "earliest"
	cfg.Kafka.Topics = []string{loadTopic}
	cfg.Routes = decide.Routes{{ID: "confirm", Match: decide.Match{Type: "order.created"}, WorkflowType: "W", TaskQueue: "q"}}
	cfg.Postgres.URL = e.dbURL
	// No Temporal: dedup ingress dials it lazily, and POST /v1/events
	// never reaches it (a status request would fail on this address).
	cfg.Temporal.HostPort = "127.0.0.1:1"
	cfg.Log.Level = "warn"
	cfg.Ingress.Listen = freeAddr(e.t)
	cfg.Ingress.AdminListen = freeAddr(e.t)
	cfg.Ingress.MaxBodyBytes = maxBody
	cfg.Ingress.PublicURL = "https://events.example.com"
	return cfg
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().String()
}

// ingressProc is a running `dedup ingress`.
type ingressProc struct {
	name   string
	base   string // http://listen
	admin  string
	cmd    *exec.Cmd
	stderr *syncBuffer
	done   chan struct{}
}

// configYAML is cfg as a config file, with extra merged into its ingress
// section (keys the config.Config of this build may not have yet).
func configYAML(t *testing.T, cfg config.Config, extraIngress map[string]any) []byte {
	t.Helper()
	b, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(extraIngress) == 0 {
		return b
	}
	var m map[string]any
	if err := yaml.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	ing := m["ingress"].(map[string]any)
	for k, v := range extraIngress {
		ing[k] = v
	}
	if b, err = yaml.Marshal(m); err != nil {
		t.Fatal(err)
	}
	return b
}

// start runs `dedup ingress` with the config file body and waits until
// its API accepts connections; the error says why it did not (its exit,
// with its stderr).
func (e *loadEnv) start(name string, cfg config.Config, body []byte) (*ingressProc, error) {
	e.t.Helper()
	path := filepath.Join(e.t.TempDir(), name+".yaml")
	if err := os.WriteFile(path, body, 0o600); err != nil {
		e.t.Fatal(err)
	}
	p := &ingressProc{name: name, base: "http://" + cfg.Ingress.Listen, admin: cfg.Ingress.AdminListen,
		stderr: &syncBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(e.bin, "ingress", "--config", path)
	p.cmd.Stdout, p.cmd.Stderr = p.stderr, p.stderr
	if err := p.cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	e.t.Cleanup(func() { p.stop(e.t) })
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		select {
		case <-p.done:
			return nil, fmt.Errorf("%s exited at start (%v): %s", name, p.cmd.ProcessState, p.stderr.String())
		default:
		}
		if c, err := net.Dial("tcp", cfg.Ingress.Listen); err == nil {
			_ = c.Close()
			return p, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%s does not listen after 30 s: %s", name, p.stderr.String())
		}
	}
}

// stop sends SIGTERM and waits (in-flight requests are answered first).
func (p *ingressProc) stop(t *testing.T) {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		t.Errorf("%s did not stop in 30 s after SIGINT", p.name)
	}
}

// memory is the process's peak and current resident set (VmHWM, VmRSS)
// in bytes.
func (p *ingressProc) memory(t *testing.T) (peak, now int64) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		t.Fatalf("%s: %v", p.name, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 3 && f[2] == "kB" {
			v, _ := strconv.ParseInt(f[1], 10, 64)
			switch f[0] {
			case "VmHWM:":
				peak = v << 10
			case "VmRSS:":
				now = v << 10
			}
		}
	}
	return peak, now
}

// metrics is the process's /metrics, one sample a line.
func (p *ingressProc) metrics(t *testing.T) string {
	t.Helper()
	resp, err := http.Get("http://" + p.admin + "/metrics")
	if err != nil {
		t.Fatalf("%s /metrics: %v", p.name, err)
	}
	defer func() { _ = resp.Body.Close() }()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	return b.String()
}

// metric sums the samples of name in text whose labels contain every
// label="value" given; -1 when there is no sample.
func metric(text, name string, labels ...string) float64 {
	total, seen := 0.0, false
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, name+" ") && !strings.HasPrefix(line, name+"{") {
			continue
		}
		ok := true
		for i := 0; i+1 < len(labels); i += 2 {
			ok = ok && strings.Contains(line, fmt.Sprintf("%s=%q", labels[i], labels[i+1]))
		}
		if !ok {
			continue
		}
		f := strings.Fields(line)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
			total, seen = total+v, true
		}
	}
	if !seen {
		return -1
	}
	return total
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.b.Len() > 1<<20 {
		return len(p), nil // enough to say what went wrong
	}
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
