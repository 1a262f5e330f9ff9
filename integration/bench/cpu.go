package bench

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// cpuClock reads this process's CPU time (getrusage RUSAGE_SELF, user +
// system, all threads). A stage reads it at the start and the end of its
// measured window only, so that set-up (producing the backlog, prefilling
// the ledger, dialling) is not counted.
func cpuClock() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// window is a measured window: wall and CPU time from its start, and the
// infrastructure core's jiffies.
type window struct {
	wall  time.Time
	cpu   time.Duration
	infra coreTimes
	// profiled: this window restarted the stage's CPU profile, which its
	// end stops (windowProfile).
	profiled bool
}

func startWindow() window {
	p := stageProfile.restart() // before the clocks: its own cost is not the window's
	return window{wall: time.Now(), cpu: cpuClock(), infra: readCore(infraCore), profiled: p}
}

// cpuSeconds is the CPU time the process used since the window started.
// It ends the window's CPU profile, if the window has one.
func (w window) cpuSeconds() float64 {
	s := (cpuClock() - w.cpu).Seconds()
	if w.profiled {
		stageProfile.end()
	}
	return s
}

// infraBusy is the share of the window the infrastructure's core was busy
// (all its processes: kfake, Temporal, PostgreSQL, the proxies), from
// /proc/stat; 0 when unreadable. Near 1, the infrastructure (one core
// here, machines of their own in a deployment) is what limits the stage,
// not the measured process.
func (w window) infraBusy() float64 { return w.infra.busySince(readCore(infraCore)) }

// infraCore is the CPU the infrastructure is pinned to (Placement.InfraCPU).
const infraCore = 0

// coreTimes are one CPU's busy and total jiffies (/proc/stat).
type coreTimes struct{ busy, total uint64 }

func (c coreTimes) busySince(now coreTimes) float64 {
	if now.total <= c.total || c.total == 0 {
		return 0
	}
	return float64(now.busy-c.busy) / float64(now.total-c.total)
}

// readCore reads the cpuN line of /proc/stat: user nice system idle
// iowait irq softirq steal ...; idle and iowait are not busy.
func readCore(n int) coreTimes {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return coreTimes{}
	}
	return parseCore(string(b), n)
}

func parseCore(stat string, n int) coreTimes {
	prefix := fmt.Sprintf("cpu%d ", n)
	for _, line := range strings.Split(stat, "\n") {
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		var t coreTimes
		for i, f := range strings.Fields(line)[1:] {
			v, err := strconv.ParseUint(f, 10, 64)
			if err != nil || i >= 8 { // guest times are inside user already
				break
			}
			t.total += v
			if i != 3 && i != 4 {
				t.busy += v
			}
		}
		return t
	}
	return coreTimes{}
}

// Placement is where the benchmark's processes run.
type Placement struct {
	Pinned bool `json:"pinned"`
	// InfraCPU and StageCPU are the CPUs (taskset -c lists) of the
	// infrastructure and of the measured process.
	InfraCPU string `json:"infra_cpu"`
	StageCPU string `json:"stage_cpu"`
	// Infra is `taskset -cp` of the infra process and its children (the
	// throwaway PostgreSQL), as it reported them.
	Infra []string `json:"infra_affinity"`
	// Stage is `taskset -cp` of one stage process, as it reported it.
	Stage string `json:"stage_affinity"`
}

// CheckPinning says why the benchmark cannot pin its processes to CPUs 0
// and 1 (nil: it can).
func CheckPinning() error {
	if _, err := exec.LookPath("taskset"); err != nil {
		return fmt.Errorf("taskset is not installed (util-linux); pass -no-pin to run unpinned, which the report then says")
	}
	if runtime.NumCPU() < 2 {
		return fmt.Errorf("this process may use %d CPU; isolation needs 2 (infrastructure on CPU 0, the measured process on CPU 1); pass -no-pin to run unpinned", runtime.NumCPU())
	}
	if err := exec.Command("taskset", "-c", "1", "true").Run(); err != nil {
		return fmt.Errorf("taskset -c 1 fails (%v): CPU 1 is not available to this process; pass -no-pin to run unpinned", err)
	}
	return nil
}

// Pinned is the command line that runs args on cpus (taskset -c), or
// args alone when cpus is empty.
func Pinned(cpus string, args ...string) *exec.Cmd {
	if cpus == "" {
		return exec.Command(args[0], args[1:]...)
	}
	return exec.Command("taskset", append([]string{"-c", cpus}, args...)...)
}

// SelfAffinity is `taskset -cp` of this process.
func SelfAffinity() string { return affinityOf(os.Getpid(), false)[0] }

// StartCPUProfile writes this process's CPU profile to path until the
// returned func is called; it returns the error of closing the file.
func StartCPUProfile(path string) (func() error, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	// pprof's own 100 Hz: raising the rate first (runtime.SetCPUProfileRate)
	// makes the runtime refuse pprof's rate and the profile under-counts
	// (measured: 197 ms of samples for 780 ms of CPU). For enough samples,
	// profile longer stages (-records, -replay).
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close() // nothing was written: the start's error is the one to return
		return nil, err
	}
	return func() error {
		pprof.StopCPUProfile()
		return errors.Join(f.Close(), writeAllocsProfile(strings.TrimSuffix(path, ".pprof")+".allocs.pprof"))
	}, nil
}

// windowProfile is a stage process's CPU profile. It runs from the
// stage's start, and each measured window starts it over: the first into
// the same file (what the stage's start wrote is dropped), each later one
// into a file of its own beside it (NAME.window2.pprof, …), and the
// window's end stops it. A window's profile is its work alone (the
// router's run, the starts, the claims), not the set-up before it
// (generating and producing the backlog, prefilling the ledger: a third
// of a replay stage's samples); a stage with no window keeps the whole
// stage's profile. Windows do not overlap: one that starts while another's
// profile runs has none.
type windowProfile struct {
	mu      sync.Mutex
	path    string
	f       *os.File
	running bool
	windows int  // windows that had a profile
	inside  bool // the running profile is a window's
	// trace: the first window also writes an execution trace beside its
	// profile (NAME.trace; StartStageTrace), whose blocking profiles
	// (`go tool trace -pprof=net|sync|sched`) say what each goroutine
	// waited for: the CPU profile says only what ran.
	trace  bool
	traceF *os.File
	err    error
}

// stageProfile is this process's (StartStageProfile).
var stageProfile windowProfile

// StartStageProfile starts this stage process's CPU profile (windowProfile)
// in path; the returned func stops it if a window has not, writes the
// allocation profile beside it and returns the first error of either.
func StartStageProfile(path string) (func() error, error) {
	p := &stageProfile
	p.mu.Lock()
	defer p.mu.Unlock()
	p.path = path
	if err := p.startLocked(path); err != nil {
		return nil, err
	}
	return func() error {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.stopLocked()
		return errors.Join(p.err, writeAllocsProfile(strings.TrimSuffix(path, ".pprof")+".allocs.pprof"))
	}, nil
}

// StartStageTrace makes the stage's first measured window also write an
// execution trace beside its CPU profile (StartStageProfile, which must
// run first).
func StartStageTrace() {
	stageProfile.mu.Lock()
	stageProfile.trace = true
	stageProfile.mu.Unlock()
}

// restart starts a window's profile; it says whether it did (false: no
// profile, or another window's runs).
func (p *windowProfile) restart() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.path == "" || p.inside {
		return false
	}
	p.stopLocked()
	p.windows++
	path := p.path
	if p.windows > 1 {
		path = fmt.Sprintf("%s.window%d.pprof", strings.TrimSuffix(p.path, ".pprof"), p.windows)
	}
	if err := p.startLocked(path); err != nil {
		p.err = errors.Join(p.err, err)
		return false
	}
	p.inside = true
	if p.trace && p.windows == 1 {
		f, err := os.Create(strings.TrimSuffix(p.path, ".pprof") + ".trace")
		if err == nil {
			if err = trace.Start(f); err != nil {
				err = errors.Join(err, f.Close())
			} else {
				p.traceF = f
			}
		}
		p.err = errors.Join(p.err, err)
	}
	return true
}

// end stops the profile of the window that restarted it.
func (p *windowProfile) end() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stopLocked()
	p.inside = false
	if p.traceF != nil {
		trace.Stop()
		p.err = errors.Join(p.err, p.traceF.Close())
		p.traceF = nil
	}
}

func (p *windowProfile) startLocked(path string) error {
	f, err := os.Create(path) // truncates what the stage's start wrote
	if err != nil {
		return err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close() // nothing was written: the start's error is the one to return
		return err
	}
	p.f, p.running = f, true
	return nil
}

func (p *windowProfile) stopLocked() {
	if !p.running {
		return
	}
	pprof.StopCPUProfile()
	p.err = errors.Join(p.err, p.f.Close())
	p.f, p.running = nil, false
}

// profileAllocsEvery is the sampling rate of the allocation profile
// written beside each CPU profile (runtime.MemProfileRate: one sample per
// this many bytes allocated): the runtime's default, 512 KiB. A finer
// rate costs the measured stage CPU that its figures then count: at
// 32 KiB, runtime.profilealloc was 5% of the router's CPU per workflow
// and of the SDK start's (the profiles of the report of 2026-11-28).
const profileAllocsEvery = 512 << 10

// writeAllocsProfile writes the process's allocations since it started
// (pprof's allocs profile: the set-up's too, so read it focused, e.g.
// -focus 'processor|sink|kgo'; go tool pprof -sample_index=alloc_space).
func writeAllocsProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	return errors.Join(pprof.Lookup("allocs").WriteTo(f, 0), f.Close())
}
