//go:build failpoints

package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/dedupio/dedup/processor"
)

// failpoints reads DEDUP_FAILPOINT, which the crash tests set: the process
// exits abruptly (as SIGKILL would leave it: nothing flushed, nothing
// committed) at the named point, on its Nth visit. Values:
// "after-claim[:N]" (claims committed, nothing started),
// "after-start[:N]" (a workflow started, not marked, offset not committed)
// and "after-signal[:N]" (a signal route's SignalWithStart accepted, the
// delivery not marked, offset not committed).
//
// Only test binaries have it (go build -tags failpoints); the shipped one
// refuses the variable (nofailpoints.go).
func failpoints(spec string) (crashPoints, error) {
	var h crashPoints
	if spec == "" {
		return h, nil
	}
	name, nth, _ := strings.Cut(spec, ":")
	n := int64(1)
	if nth != "" {
		v, err := strconv.ParseInt(nth, 10, 64)
		if err != nil || v < 1 {
			return h, fmt.Errorf("DEDUP_FAILPOINT %q: count must be a positive integer", spec)
		}
		n = v
	}
	var seen atomic.Int64
	crash := func() {
		if seen.Add(1) == n {
			fmt.Fprintf(os.Stderr, "dedup: failpoint %s hit, exiting\n", spec)
			os.Exit(137)
		}
	}
	switch name {
	case "after-claim":
		h.AfterClaim = crash
	case "after-start":
		h.AfterStart = crash
	case "after-signal":
		h.AfterSignal = crash
	default:
		return h, fmt.Errorf("DEDUP_FAILPOINT %q: unknown failpoint (after-claim, after-start, after-signal)", spec)
	}
	return h, nil
}

// crashPoints are the router's test-only stops (processor.Failpoints,
// only in this build).
type crashPoints = processor.Failpoints

// withCrashPoints returns ctx carrying h to the router's Run.
func withCrashPoints(ctx context.Context, h crashPoints) context.Context {
	return processor.WithFailpoints(ctx, h)
}
