package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dedupio/dedup/internal/config"
)

// skewedBin builds dedup with a wall clock that DEDUP_WALL_CLOCK_SKEW (in
// seconds) moves away from the machine's, the monotonic clock untouched:
// what a replica on a host whose clock is wrong sees. Go reads the clock
// through the vDSO, not libc, so libfaketime cannot do this; the build
// overlays the standard library's time.Now instead (go build -overlay).
var skewedBin = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp(binDir, "dedup-skewed-") // removed with binDir after the tests
	if err != nil {
		return "", err
	}
	// The standard library of the go command that builds the binary below
	// (go build -C ..), which the overlay replaces a file of.
	out, err := exec.Command("go", "env", "-C", "..", "GOROOT").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOROOT: %w", err)
	}
	stdTime := filepath.Join(strings.TrimSpace(string(out)), "src", "time", "time.go")
	src, err := os.ReadFile(stdTime)
	if err != nil {
		return "", err
	}
	const now = "func Now() Time {\n\tsec, nsec, mono := runtimeNow()\n"
	if !strings.Contains(string(src), now) {
		return "", os.ErrNotExist // another Go release: the overlay must follow it
	}
	patched := strings.Replace(string(src), now, now+"\tsec += wallSkew\n", 1) + `
var wallSkew = func() int64 {
	v, _ := syscall.Getenv("DEDUP_WALL_CLOCK_SKEW")
	var n int64
	for i, c := range v {
		switch {
		case i == 0 && c == '-':
		case c >= '0' && c <= '9':
			n = n*10 + int64(c-'0')
		default:
			return 0
		}
	}
	if len(v) > 0 && v[0] == '-' {
		return -n
	}
	return n
}()
`
	if !strings.Contains(patched, "\t\"syscall\"\n") {
		patched = strings.Replace(patched, "import (\n", "import (\n\t\"syscall\"\n", 1)
	}
	timeGo := filepath.Join(dir, "time.go")
	if err := os.WriteFile(timeGo, []byte(patched), 0o644); err != nil {
		return "", err
	}
	ov, _ := json.Marshal(map[string]map[string]string{"Replace": {stdTime: timeGo}})
	overlay := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(overlay, ov, 0o644); err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "dedup-skewed")
	build := exec.Command("go", "build", "-C", "..", "-overlay", overlay, "-tags", "failpoints", "-o", bin, "./cmd/dedup")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	return bin, build.Run()
})

// 16. Clock skew of hours: two of three replicas run with their wall clock
// six hours ahead and six hours behind; the ledger purges every second
// with a one-hour retention; the replica with the right clock is killed
// mid-run, so the skewed ones take its partitions over. dedup takes no
// decision from a replica's wall clock (ledger ages and the purge use
// PostgreSQL's now(), the router monotonic durations), so: every workflow
// started once, nothing purged that is younger than an hour (the ledger
// holds every row), no pending row ever reported stale, dead letters
// written by the skewed replicas all there.
func TestFaultClockSkew(t *testing.T) {
	bin, err := skewedBin()
	if err != nil {
		t.Fatalf("building dedup with a skewed clock: %v", err)
	}
	const sixHours = "21600"
	runScenario(t, scenario{spec: baseSpec(31), routers: 1, bad: poison(),
		cfg: func(c *config.Config) {
			c.Postgres.Retention = time.Hour
			c.Postgres.PurgeInterval = time.Second
			c.Postgres.AcceptShortHorizon = true
		},
		fault: func(s *run) {
			ahead := s.spawnBin(bin, "DEDUP_WALL_CLOCK_SKEW="+sixHours)
			behind := s.spawnBin(bin, "DEDUP_WALL_CLOCK_SKEW=-"+sixHours)
			for _, p := range []*proc{ahead, behind} {
				if !eventually(time.Minute, func() bool { return p.ready() == 200 }) {
					t.Fatalf("%s (skewed) not ready within a minute", p.name)
				}
			}
			time.Sleep(2 * time.Second)
			s.procs[0].signal(t, syscall.SIGKILL) // the replica with the right clock
			stale := 0.0
			for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
				for _, p := range []*proc{ahead, behind} {
					stale = max(stale, p.metric("dedup_ledger_pending_stale", "", ""))
				}
			}
			if stale != 0 {
				t.Errorf("a skewed replica reported %v stale pending rows (pending rows are seconds old)", stale)
			}
		}})
}
