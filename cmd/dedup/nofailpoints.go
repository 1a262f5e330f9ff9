//go:build !failpoints

package main

import (
	"errors"

	"github.com/dedupio/dedup/processor"
)

// errNoFailpoints is what a shipped binary says to DEDUP_FAILPOINT: a test
// harness that set it on the wrong build learns so at once, instead of
// waiting for a crash that never comes.
var errNoFailpoints = errors.New("DEDUP_FAILPOINT is set but this binary was built without the failpoints tag (go build -tags failpoints)")

// failpoints is the shipped binary's: no crash points, whatever the
// environment says (the test build's is in failpoints.go).
func failpoints(spec string) (processor.Hooks, error) {
	if spec != "" {
		return processor.Hooks{}, errNoFailpoints
	}
	return processor.Hooks{}, nil
}
