package integration

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/dedupio/dedup/internal/config"
	"github.com/dedupio/dedup/internal/testsupport/promtext"
)

// proc is a router running as an OS process (`dedup run`), so that faults
// are real signals.
type proc struct {
	name  string
	cmd   *exec.Cmd
	admin string
	done  chan struct{}
	err   error
}

// spawn starts a router process with cfg, on an admin port of its own.
func (e *env) spawn(name string, cfg config.Config, extraEnv ...string) *proc {
	e.t.Helper()
	return e.spawnBin(dedupBin, name, cfg, extraEnv...)
}

// spawnBin is spawn with another build of dedup.
func (e *env) spawnBin(bin, name string, cfg config.Config, extraEnv ...string) *proc {
	e.t.Helper()
	cfg.Admin.Listen = "127.0.0.1:0" // the port it binds is read from /proc (listen_test.go)
	p := &proc{name: name, admin: cfg.Admin.Listen, done: make(chan struct{})}
	if e.beforeSpawn != nil {
		e.beforeSpawn(cfg)
	}
	p.cmd = exec.Command(bin, "run", "--config", e.writeConfig(cfg))
	p.cmd.Env = append(os.Environ(), extraEnv...)
	p.cmd.Stdout, p.cmd.Stderr = os.Stderr, os.Stderr
	e.startProc(p)
	return p
}

// startProc starts p.cmd, stops it at the test's end, and waits until it
// listens on its admin port (p.admin) or exits.
func (e *env) startProc(p *proc) {
	e.t.Helper()
	if err := p.cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	e.t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	addr, err := listenAddr(p.cmd.Process.Pid, p.done)
	if err != nil {
		e.t.Fatalf("%s: %v", p.name, err)
	}
	if addr != "" {
		p.admin = addr
	}
}

func (p *proc) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

func (p *proc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if p.running() {
		if err := p.cmd.Process.Signal(sig); err != nil {
			t.Fatalf("%s: %v", p.name, err)
		}
	}
}

// wait waits for the process to exit and returns its exit code.
func (p *proc) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		_ = p.cmd.Process.Kill()
		<-p.done
		t.Fatalf("%s did not exit in %s", p.name, timeout)
	}
	return p.cmd.ProcessState.ExitCode()
}

// stop sends SIGTERM and expects a clean exit.
func (p *proc) stop(t *testing.T) {
	t.Helper()
	if !p.running() {
		return
	}
	p.signal(t, syscall.SIGTERM)
	if code := p.wait(t, time.Minute); code != 0 {
		t.Errorf("%s exited %d after SIGTERM", p.name, code)
	}
}

// ready returns the status code of /readyz (0 if it does not answer).
func (p *proc) ready() int {
	c := http.Client{Timeout: 4 * time.Second}
	resp, err := c.Get("http://" + p.admin + "/readyz")
	if err != nil {
		return 0
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

// metric sums a metric's samples (optionally only those carrying
// label="value") from the process's /metrics.
func (p *proc) metric(name, label, value string) float64 {
	return promtext.Sum(p.admin, name, label, value)
}

// eventually polls cond until it holds or the timeout passes.
func eventually(timeout time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return false
}

// committedMonitor samples the group's committed offsets until stopped and
// reports any partition whose committed offset went backwards.
func (e *env) committedMonitor() (stop func() []string) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan []string, 1)
	go func() {
		last := map[int32]int64{}
		var regressions []string
		for ctx.Err() == nil {
			resp, err := e.adm.FetchOffsets(ctx, e.group)
			if err == nil {
				for _, ps := range resp {
					for p, o := range ps {
						if o.Err == nil && o.At >= 0 {
							if prev, ok := last[p]; ok && o.At < prev {
								regressions = append(regressions, fmt.Sprintf("partition %d went from %d back to %d", p, prev, o.At))
							}
							last[p] = o.At
						}
					}
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
		done <- regressions
	}()
	return func() []string { cancel(); return <-done }
}

// The harness gives each router process an admin port. A port found free
// and closed can be taken before the router binds it: by another process
// listening, or as the local port of an outgoing connection (CI of
// da57e34: "admin.listen 127.0.0.1:41423: ... address already in use").
// The router still comes up, on an admin port the harness reaches.
func TestASpawnedRouterComesUpWhenAPortFoundFreeIsTakenMeanwhile(t *testing.T) {
	e := newEnv(t, 1)
	e.beforeSpawn = func(cfg config.Config) {
		if l, err := net.Listen("tcp", cfg.Admin.Listen); err == nil {
			t.Cleanup(func() { _ = l.Close() })
		}
	}
	p := e.spawn("r", e.config())
	if !eventually(time.Minute, func() bool { return p.ready() == 200 || !p.running() }) || !p.running() {
		t.Fatalf("router not ready on %s (running=%v, exit %v)", p.admin, p.running(), p.err)
	}
	p.stop(t)
}
