package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	toxiclient "github.com/Shopify/toxiproxy/v2/client"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"google.golang.org/grpc/codes"

	"github.com/dedupio/dedup/integration/devstack"
)

// Infra is where a measured process finds its dependencies: every address
// is a toxiproxy proxy in front of the real one (in the infra process), so
// that latency can be set per dependency (SetLatency). Kafka too: the
// broker advertises the proxy's address in its metadata, so clients that
// follow metadata stay behind the proxy.
type Infra struct {
	Brokers  []string `json:"brokers"`
	Temporal string   `json:"temporal"`
	// DatabaseURL is the admin database, through the proxy; CreateDatabases
	// says whether stages may create their own databases next to it (a
	// throwaway cluster: yes; an external DATABASE_URL: no).
	DatabaseURL     string `json:"database_url"`
	CreateDatabases bool   `json:"create_databases"`
	Namespace       string `json:"namespace"`
	// TemporalDirect is the server's own address, for the orchestrator's
	// bookkeeping (Settle), which should not pay the injected latency.
	TemporalDirect string `json:"temporal_direct"`
	// ProxyAPI is toxiproxy's HTTP API (SetLatency).
	ProxyAPI string `json:"proxy_api"`
	// FaultsAPI is the Temporal server's fault injection
	// (devstack.TemporalFaults) over HTTP: the guarantees stage's outage
	// (RemoteFaults).
	FaultsAPI string `json:"faults_api"`
	// Affinity is `taskset -cp` of the infra process and of its children
	// (PostgreSQL): where the infrastructure runs.
	Affinity []string `json:"affinity"`
}

// InfraConfig is what StartInfra starts.
type InfraConfig struct {
	Durable bool // PostgreSQL with fsync on
	// PGSettings are more settings of the throwaway PostgreSQL, comma-
	// separated name=value (shared_buffers=4GB,wal_compression=lz4);
	// ignored with DatabaseURL.
	PGSettings  string
	DatabaseURL string // an existing PostgreSQL instead of a throwaway one
}

// pgSettings splits -pg-settings.
func pgSettings(s string) []string {
	var out []string
	for _, kv := range strings.Split(s, ",") {
		if kv = strings.TrimSpace(kv); kv != "" {
			out = append(out, kv)
		}
	}
	return out
}

// describe says which PostgreSQL the stages use, for the report.
func (c InfraConfig) describe() string {
	if c.DatabaseURL != "" {
		return "DATABASE_URL (settings as that server has them)"
	}
	fsync := "fsync off, full_page_writes off"
	if c.Durable {
		fsync = "fsync on, full_page_writes on"
	}
	extra := ""
	if c.PGSettings != "" {
		extra = ", then " + c.PGSettings
	}
	return fmt.Sprintf("throwaway PostgreSQL 15 cluster: %s, shared_buffers 256MB, max_wal_size 2GB%s", fsync, extra)
}

// StartInfra starts the embedded stack (kfake, Temporal, PostgreSQL) with a
// toxiproxy proxy in front of each, and toxiproxy's API. The caller pins
// the process (the throwaway PostgreSQL, forked from it, inherits that).
func StartInfra(ctx context.Context, cfg InfraConfig) (*Infra, func(), error) {
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	// The Kafka proxy's address must be known before the broker starts
	// (it advertises it): reserve a port, then proxy it to the broker.
	kafkaFront, err := freeAddr()
	if err != nil {
		return nil, nil, err
	}
	listen, kafkaBack := advertising(kafkaFront)
	// The faults interceptor costs a lock per start while no fault is set.
	faults := &devstack.TemporalFaults{}
	stack, err := devstack.Start(ctx, devstack.Config{Namespace: "default", DurablePostgres: cfg.Durable, DatabaseURL: cfg.DatabaseURL,
		PostgresSettings: pgSettings(cfg.PGSettings),
		KafkaListen:      listen, TemporalFaults: faults})
	if err != nil {
		return nil, nil, err
	}
	stop := func() {
		for _, p := range srv.Collection.Proxies() {
			p.Stop()
		}
		stack.Stop()
	}
	in := &Infra{Namespace: stack.Namespace, TemporalDirect: stack.Temporal.HostPort(), CreateDatabases: stack.Postgres != nil}
	add := func(name, listen, upstream string) (string, error) {
		p := toxiproxy.NewProxy(srv, name, listen, upstream)
		if err := srv.Collection.Add(p, true); err != nil {
			return "", fmt.Errorf("starting the %s proxy: %w", name, err)
		}
		return p.Listen, nil
	}
	if _, err := add("kafka", kafkaFront, *kafkaBack); err != nil {
		stop()
		return nil, nil, err
	}
	in.Brokers = []string{kafkaFront}
	if in.Temporal, err = add("temporal", "127.0.0.1:0", stack.Temporal.HostPort()); err != nil {
		stop()
		return nil, nil, err
	}
	adminURL := stack.DatabaseURL
	if stack.Postgres != nil {
		adminURL = stack.Postgres.URL()
	}
	u, err := url.Parse(adminURL)
	if err != nil {
		stop()
		return nil, nil, fmt.Errorf("parsing the database URL: %w", err)
	}
	if u.Host, err = add("postgres", "127.0.0.1:0", u.Host); err != nil {
		stop()
		return nil, nil, err
	}
	in.DatabaseURL = u.String()
	if in.ProxyAPI, err = serveAPI(srv); err != nil {
		stop()
		return nil, nil, err
	}
	if in.FaultsAPI, err = serveFaults(faults); err != nil {
		stop()
		return nil, nil, err
	}
	in.Affinity = affinityOf(os.Getpid(), true)
	return in, stop, nil
}

// serveAPI serves toxiproxy's HTTP API on a free port and returns its URL
// once it answers.
func serveAPI(srv *toxiproxy.ApiServer) (string, error) {
	api, err := freeAddr()
	if err != nil {
		return "", err
	}
	host, port, _ := net.SplitHostPort(api)
	go srv.Listen(host, port)
	for i := 0; ; i++ {
		if _, err := toxiclient.NewClient("http://" + api).Proxies(); err == nil {
			return "http://" + api, nil
		} else if i == 100 {
			return "", fmt.Errorf("toxiproxy API on %s: %w", api, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// serveFaults serves f over HTTP on a free port (POST /refuse?namespace=
// NS&code=GRPC_CODE&ms=MILLISECONDS, POST /clear) and returns its URL.
func serveFaults(f *devstack.TemporalFaults) (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /refuse", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		code, err1 := strconv.Atoi(q.Get("code"))
		ms, err2 := strconv.Atoi(q.Get("ms"))
		if err := errors.Join(err1, err2); err != nil || q.Get("namespace") == "" {
			http.Error(w, fmt.Sprintf("want namespace, code and ms: %v", err), http.StatusBadRequest)
			return
		}
		f.Refuse(q.Get("namespace"), codes.Code(code), time.Duration(ms)*time.Millisecond)
	})
	mux.HandleFunc("POST /clear", func(http.ResponseWriter, *http.Request) { f.Clear() })
	go func() { _ = http.Serve(l, mux) }()
	return "http://" + l.Addr().String(), nil
}

// RemoteFaults is a client of an infra process's FaultsAPI
// (peer.Faults). Its methods cannot fail by their signature: Err says
// whether a call did.
type RemoteFaults struct {
	API string
	mu  sync.Mutex
	err error
}

// Refuse makes the infra process's Temporal fail every start in namespace
// with code for d (devstack.TemporalFaults.Refuse). A failed call is kept
// for Err.
func (f *RemoteFaults) Refuse(namespace string, code codes.Code, d time.Duration) {
	f.post(fmt.Sprintf("/refuse?namespace=%s&code=%d&ms=%d", url.QueryEscape(namespace), code, d.Milliseconds()))
}

// Clear removes every fault (devstack.TemporalFaults.Clear). A failed call
// is kept for Err.
func (f *RemoteFaults) Clear() { f.post("/clear") }

// Err is the first failed call's error.
func (f *RemoteFaults) Err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

func (f *RemoteFaults) post(path string) {
	resp, err := http.Post(f.API+path, "text/plain", nil)
	if err == nil {
		if resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("%s: %s", path, resp.Status)
		}
		_ = resp.Body.Close()
	}
	if err != nil {
		f.mu.Lock()
		f.err = errors.Join(f.err, err)
		f.mu.Unlock()
	}
}

// advertising is a kfake.ListenFn whose listener reports front as its
// address (the broker advertises it in metadata); *back is the real
// address once the broker listens.
func advertising(front string) (func(network, address string) (net.Listener, error), *string) {
	back := new(string)
	return func(network, address string) (net.Listener, error) {
		l, err := net.Listen(network, address)
		if err != nil {
			return nil, err
		}
		*back = l.Addr().String()
		return advertised{Listener: l, addr: front}, nil
	}, back
}

type advertised struct {
	net.Listener
	addr string
}

func (a advertised) Addr() net.Addr {
	ta, _ := net.ResolveTCPAddr("tcp", a.addr)
	return ta
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("reserving a port: %w", err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().String(), nil
}

// Latency is the round trip the proxies add, per dependency.
type Latency struct {
	Name     string        `json:"name"`
	Temporal time.Duration `json:"temporal_rtt"`
	Postgres time.Duration `json:"postgres_rtt"`
	Kafka    time.Duration `json:"kafka_rtt"`
}

// SetLatency replaces the proxies' latency toxics: half of each round trip
// on the way up, half on the way down.
func SetLatency(api string, l Latency) error {
	cl := toxiclient.NewClient(api)
	for name, rtt := range map[string]time.Duration{"temporal": l.Temporal, "postgres": l.Postgres, "kafka": l.Kafka} {
		p, err := cl.Proxy(name)
		if err != nil {
			return fmt.Errorf("reading the %s proxy: %w", name, err)
		}
		for _, dir := range []string{"upstream", "downstream"} {
			tname := "latency_" + dir
			_ = p.RemoveToxic(tname) // absent the first time
			if rtt <= 0 {
				continue
			}
			half := rtt.Microseconds() / 2
			// The toxic takes whole milliseconds: an odd round trip puts
			// the extra millisecond on the way down.
			ms := half / 1000
			if dir == "downstream" {
				ms = rtt.Milliseconds() - ms
			}
			if _, err := p.AddToxic(tname, "latency", dir, 1, toxiclient.Attributes{"latency": ms}); err != nil {
				return fmt.Errorf("setting %s latency on %s: %w", dir, name, err)
			}
		}
	}
	return nil
}

// affinityOf is `taskset -cp` of pid and, with children, of every process
// it forked (recursively).
func affinityOf(pid int, children bool) []string {
	out, err := exec.Command("taskset", "-cp", strconv.Itoa(pid)).Output()
	if err != nil {
		return []string{fmt.Sprintf("pid %d: taskset: %v", pid, err)}
	}
	res := []string{strings.TrimSpace(string(out)) + " (" + comm(pid) + ")"}
	if !children {
		return res
	}
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, t := range tasks {
		b, _ := os.ReadFile(t)
		for _, f := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(f); err == nil {
				res = append(res, affinityOf(c, true)...)
			}
		}
	}
	return res
}

func comm(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	return strings.TrimSpace(string(b))
}
