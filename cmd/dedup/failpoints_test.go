//go:build failpoints

package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

func TestFailpointsParse(t *testing.T) {
	for _, tc := range []struct {
		spec              string
		claim, start, bad bool
	}{
		{spec: ""},
		{spec: "after-claim", claim: true},
		{spec: "after-claim:3", claim: true},
		{spec: "after-start:150", start: true},
		{spec: "after-claim:x", bad: true},
		{spec: "after-claim:0", bad: true},
		{spec: "after-claim:-1", bad: true},
		{spec: "after-start:1.5", bad: true},
		{spec: "before-claim", bad: true},
		{spec: "before-claim:2", bad: true},
		{spec: "AFTER-CLAIM", bad: true},
	} {
		h, err := failpoints(tc.spec)
		if tc.bad {
			if err == nil || !strings.Contains(err.Error(), "DEDUP_FAILPOINT") {
				t.Errorf("failpoints(%q): %v, want an error naming DEDUP_FAILPOINT", tc.spec, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("failpoints(%q): %v", tc.spec, err)
			continue
		}
		if (h.AfterClaim != nil) != tc.claim || (h.AfterStart != nil) != tc.start {
			t.Errorf("failpoints(%q): AfterClaim set %v, AfterStart set %v; want %v, %v",
				tc.spec, h.AfterClaim != nil, h.AfterStart != nil, tc.claim, tc.start)
		}
	}
}

// after-claim:3 lets two visits through and exits 137 on the third. The
// exit happens in a child process (this test binary, run again).
func TestFailpointExitsOnNthVisit(t *testing.T) {
	if os.Getenv("DEDUP_FAILPOINT_CHILD") == "1" {
		h, err := failpoints("after-claim:3")
		if err != nil {
			t.Fatal(err)
		}
		h.AfterClaim()
		h.AfterClaim()
		os.Stdout.WriteString("two visits survived\n")
		h.AfterClaim()
		os.Stdout.WriteString("third visit survived\n")
		os.Exit(0)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestFailpointExitsOnNthVisit$")
	cmd.Env = append(os.Environ(), "DEDUP_FAILPOINT_CHILD=1")
	var out bytes.Buffer
	cmd.Stdout = &out
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 137 {
		t.Fatalf("child: %v, want exit status 137\n%s", err, out.String())
	}
	if got := out.String(); !strings.Contains(got, "two visits survived") || strings.Contains(got, "third") {
		t.Fatalf("child output %q: want it to survive two visits and exit on the third", got)
	}
}
