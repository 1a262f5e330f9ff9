//go:build !failpoints

package main

import (
	"context"
	"errors"
)

// errNoFailpoints is what a shipped binary says to DEDUP_FAILPOINT: a test
// harness that set it on the wrong build learns so at once, instead of
// waiting for a crash that never comes.
var errNoFailpoints = errors.New("DEDUP_FAILPOINT is set but this binary was built without the failpoints tag (go build -tags failpoints)")

// failpoints is the shipped binary's: no crash points, whatever the
// environment says (the test build's is in failpoints.go).
func failpoints(spec string) (crashPoints, error) {
	if spec != "" {
		return crashPoints{}, errNoFailpoints
	}
	return crashPoints{}, nil
}

// crashPoints are none in this build: the router has no test stops
// (processor.Failpoints exists only with -tags failpoints).
type crashPoints struct{ AfterClaim, AfterStart, AfterSignal func() }

// withCrashPoints returns ctx as it is: there is nothing to carry.
func withCrashPoints(ctx context.Context, _ crashPoints) context.Context { return ctx }
