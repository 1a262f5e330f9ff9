package app

import (
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"go.uber.org/goleak"

	"github.com/dedupio/dedup/internal/config"
)

// CheckWorker builds the tracing exporter only to read its files, and
// shuts it down before it returns: nothing it started outlives it, even
// when its caller's ctx is already done (a stranger's cancelled ctx, a
// validate interrupted by SIGINT). TracerProvider.Shutdown returns at once
// on a done ctx without stopping its span processor, so the shutdown must
// not take the caller's cancellation.
func TestCheckWorkerLeavesNothingRunningWhenItsContextIsDone(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	cfg := config.Default()
	cfg.Tracing.Exporter = "otlp"
	cfg.Tracing.OTLP.Endpoint = "127.0.0.1:4317"
	cfg.Tracing.OTLP.Insecure = true
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = CheckWorker(ctx, cfg) // an error is fine; goroutines left running are not
	time.Sleep(500 * time.Millisecond)
}

// CheckWorker is exported: called with a config that was not loaded
// (config.Config{}: no task queue, no log format, retry 0), it must not
// call it fit for dedup worker, which cannot run with it (an empty task
// queue, a wait with no backoff).
func TestCheckWorkerRefusesAConfigTheWorkerCannotRunWith(t *testing.T) {
	if err := CheckWorker(context.Background(), config.Config{}); err == nil {
		t.Errorf("CheckWorker(config.Config{}): nil, want an error naming what the worker lacks (worker.task_queue)")
	}
}

// workerCfg is a config dedup worker runs with (config.ParseWorker), its
// admin port at addr.
func workerCfg(t *testing.T, addr string) config.Config {
	t.Helper()
	cfg, err := config.ParseWorker([]byte("postgres: {url: \"postgres://u@127.0.0.1/d\"}\n" +
		"temporal: {host_port: \"127.0.0.1:7233\", namespace: default}\n" +
		"worker: {task_queue: activities}\n"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Worker.AdminListen = addr
	return cfg
}

// workerListens is what dedup worker does with worker.admin_listen first
// (app.RunWorker: serveAdmin, net.Listen): nil when it listens.
func workerListens(addr string) error {
	srv, _, err := serveAdmin("worker.admin_listen", addr, false, prometheus.NewRegistry(), slog.New(slog.DiscardHandler), func() []status { return nil })
	if err == nil {
		_ = srv.Close()
	}
	return err
}

// A zone belongs to an IPv6 literal only, and is never empty: Go's
// resolver refuses "127.0.0.1%lo" and "::1%" as hosts without asking DNS
// (neither an IP address, netip.ParseAddr, nor a domain name), so dedup
// worker stops at start on them. CheckWorker, which checks admin_listen's
// form, must refuse them too, naming worker.admin_listen.
func TestCheckWorkerRefusesAnAdminListenZoneTheWorkerCannotListenOn(t *testing.T) {
	for _, addr := range []string{"127.0.0.1%lo:0", "[127.0.0.1%lo]:0", "[::1%]:0"} {
		if err := workerListens(addr); err == nil || !strings.Contains(err.Error(), "worker.admin_listen") {
			t.Fatalf("the worker's listen on %q: %v, want it refused naming worker.admin_listen", addr, err)
		}
		if err := CheckWorker(context.Background(), workerCfg(t, addr)); err == nil || !strings.Contains(err.Error(), "worker.admin_listen") {
			t.Errorf("CheckWorker with worker.admin_listen %q, which the worker cannot listen on (%v): %v, want an error naming worker.admin_listen", addr, workerListens(addr), err)
		}
	}
}

// fakeDNS answers every A question with 127.0.0.1 and every other one
// with no records, over a stream (net.Pipe: Go's resolver frames it as
// DNS over TCP): a name server that knows the host names it is asked for,
// as Docker's embedded DNS knows a compose file's service names.
func fakeDNS(ctx context.Context, _, _ string) (net.Conn, error) {
	client, server := net.Pipe()
	go func() {
		defer func() { _ = server.Close() }()
		for {
			var n [2]byte
			if _, err := io.ReadFull(server, n[:]); err != nil {
				return
			}
			q := make([]byte, binary.BigEndian.Uint16(n[:]))
			if _, err := io.ReadFull(server, q); err != nil {
				return
			}
			// The question: QNAME's labels, QTYPE, QCLASS after the header.
			end := 12
			for end < len(q) && q[end] != 0 {
				end += int(q[end]) + 1
			}
			end += 5
			qtype := binary.BigEndian.Uint16(q[end-4 : end-2])
			r := append([]byte{}, q[:end]...)
			r[2], r[3] = 0x81, 0x80 // response, recursion desired and available, NOERROR
			binary.BigEndian.PutUint16(r[4:], 1)
			binary.BigEndian.PutUint16(r[8:], 0)
			binary.BigEndian.PutUint16(r[10:], 0)
			if qtype == 1 {
				binary.BigEndian.PutUint16(r[6:], 1)
				r = append(r, 0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 127, 0, 0, 1)
			} else {
				binary.BigEndian.PutUint16(r[6:], 0)
			}
			out := binary.BigEndian.AppendUint16(nil, uint16(len(r)))
			if _, err := server.Write(append(out, r...)); err != nil {
				return
			}
		}
	}()
	return client, nil
}

// A host name is the resolver's to judge: Go's (and Docker's embedded
// DNS, /etc/hosts) take names with an underscore, such as a compose
// service "dedup_worker" (compose v1 container names are
// project_service_1), and dedup worker listens on the address they
// resolve to. CheckWorker, which checks only admin_listen's form ("whether
// the name resolves ... is the worker's host's to say"), must not refuse
// a name the worker listens on.
func TestCheckWorkerAcceptsAnAdminListenHostNameTheWorkerListensOn(t *testing.T) {
	saved := net.DefaultResolver
	net.DefaultResolver = &net.Resolver{PreferGo: true, Dial: fakeDNS}
	defer func() { net.DefaultResolver = saved }()
	for _, addr := range []string{"dedup_worker:0", "dedup_worker_1.example.com:0"} {
		if err := workerListens(addr); err != nil {
			t.Fatalf("the worker's listen on %q: %v, want it to listen (the name resolves)", addr, err)
		}
		if err := CheckWorker(context.Background(), workerCfg(t, addr)); err != nil {
			t.Errorf("CheckWorker with worker.admin_listen %q, which the worker listens on: %v, want nil", addr, err)
		}
	}
}

// A host of dotted numbers that is no IP address ("10.0.0", an octet
// short; "127.1"; "127.000.000.001", leading zeros) is no host name
// either: Go's resolver refuses it without asking DNS, even one that
// would answer for it, so dedup worker stops at start on it. CheckWorker
// takes it for a DNS name (dnsName: letters, digits and hyphens); it must
// refuse it, naming worker.admin_listen.
func TestCheckWorkerRefusesAnAdminListenNumericHostTheWorkerCannotListenOn(t *testing.T) {
	saved := net.DefaultResolver
	net.DefaultResolver = &net.Resolver{PreferGo: true, Dial: fakeDNS} // answers every name
	defer func() { net.DefaultResolver = saved }()
	for _, addr := range []string{"10.0.0:0", "127.1:0", "127.000.000.001:0"} {
		if err := workerListens(addr); err == nil || !strings.Contains(err.Error(), "worker.admin_listen") {
			t.Fatalf("the worker's listen on %q: %v, want it refused naming worker.admin_listen", addr, err)
		}
		if err := CheckWorker(context.Background(), workerCfg(t, addr)); err == nil || !strings.Contains(err.Error(), "worker.admin_listen") {
			t.Errorf("CheckWorker with worker.admin_listen %q, which the worker cannot listen on (%v): %v, want an error naming worker.admin_listen", addr, workerListens(addr), err)
		}
	}
}
