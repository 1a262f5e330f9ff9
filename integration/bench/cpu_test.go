package bench

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// A stage's CPU profile is its measured windows' work: the first window
// starts the stage's profile over in the same file, a later one gets a
// file of its own, and what ran before the first window is dropped.
func TestEachMeasuredWindowHasAProfileOfItsOwn(t *testing.T) {
	path := filepath.Join(t.TempDir(), "01-0ms-rep1-replay.pprof")
	done, err := StartStageProfile(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stageProfile = windowProfile{} })
	first := startWindow()
	if !first.profiled {
		t.Fatal("the first window did not start the stage's profile over")
	}
	if inner := startWindow(); inner.profiled {
		t.Fatal("a window inside another's took the profile")
	}
	first.cpuSeconds()
	if stageProfile.running {
		t.Fatal("the window's end left the profile running")
	}
	second := startWindow()
	if !second.profiled {
		t.Fatal("the second window got no profile")
	}
	second.cpuSeconds()
	if err := done(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{path, filepath.Join(filepath.Dir(path), "01-0ms-rep1-replay.window2.pprof"), filepath.Join(filepath.Dir(path), "01-0ms-rep1-replay.allocs.pprof")} {
		if st, err := os.Stat(p); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v (want a profile)", filepath.Base(p), err)
		}
	}
}

// With -trace, the stage's first measured window also writes an execution
// trace beside its profile, and only the first: a trace of every window
// would cost each measured one.
func TestTheFirstMeasuredWindowWritesAnExecutionTraceBesideItsProfile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "02-0ms-rep1-replay.pprof")
	done, err := StartStageProfile(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stageProfile = windowProfile{} })
	StartStageTrace()
	tracePath := filepath.Join(filepath.Dir(path), "02-0ms-rep1-replay.trace")
	startWindow().cpuSeconds()
	first, err := os.ReadFile(tracePath)
	if err != nil || !bytes.HasPrefix(first, []byte("go 1.")) {
		t.Fatalf("the first window's trace: %v, starts %q (want Go's trace header)", err, first[:min(len(first), 16)])
	}
	startWindow().cpuSeconds()
	if err := done(); err != nil {
		t.Fatal(err)
	}
	if again, err := os.ReadFile(tracePath); err != nil || !bytes.Equal(again, first) {
		t.Fatalf("the second window rewrote the first's trace (%v)", err)
	}
}
