//go:build !failpoints

package main

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// The shipped binary has no crash points: DEDUP_FAILPOINT is an error, not
// a way to kill it.
func TestFailpointsRefusedWithoutTag(t *testing.T) {
	for _, spec := range []string{"after-claim:3", "after-start", "after-claim:x", "anything"} {
		h, err := failpoints(spec)
		if !errors.Is(err, errNoFailpoints) {
			t.Errorf("failpoints(%q) = %v, want errNoFailpoints", spec, err)
		}
		if h.AfterClaim != nil || h.AfterStart != nil {
			t.Errorf("failpoints(%q) returned hooks", spec)
		}
	}
	h, err := failpoints("")
	if err != nil || h.AfterClaim != nil || h.AfterStart != nil {
		t.Fatalf("failpoints(\"\") = %+v, %v, want no hooks, no error", h, err)
	}
}

// `dedup run` refuses the variable before it reads its config (the path
// does not exist: reading it would be a different error) or dials anything.
func TestRunRefusesFailpointWithoutTag(t *testing.T) {
	t.Setenv("DEDUP_FAILPOINT", "after-claim:3")
	code, _, stderr := dedup("run", "--config", filepath.Join(t.TempDir(), "missing.yaml"))
	if code != 2 || !strings.Contains(stderr, errNoFailpoints.Error()) {
		t.Fatalf("run with DEDUP_FAILPOINT set: exit code %d, %q, want 2 and errNoFailpoints", code, stderr)
	}
}
