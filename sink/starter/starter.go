// Package starter starts dedup's workflows in Temporal.
//
// Every start carries the deterministic workflow ID, the route's ID reuse
// policy and WorkflowExecutionErrorWhenAlreadyStarted, so that Temporal
// itself is the final guard: a start that was already made (by a crashed
// router, a re-drive, or a retried RPC whose first attempt did reach the
// server) comes back as "already started", which is success.
//
// Errors are classified once, here: unavailable, throttled, timed out and
// internal errors are transient (the router retries them); invalid
// arguments, unknown namespaces and permission errors are permanent
// (processor.Permanent: the record is dead-lettered).
package starter

import (
	"context"
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"google.golang.org/grpc/codes"

	"github.com/dedupio/dedup/processor"
)

var _ processor.Starter = (*Temporal)(nil)

// Config says how to reach Temporal.
type Config struct {
	HostPort  string `yaml:"host_port"`
	Namespace string `yaml:"namespace"`
	// StartTimeout bounds one start attempt (the SDK retries transient gRPC
	// errors inside it); the router retries past it with backoff.
	StartTimeout time.Duration `yaml:"start_timeout"`
}

// DefaultConfig points at a local Temporal.
func DefaultConfig() Config {
	return Config{HostPort: "127.0.0.1:7233", Namespace: "default", StartTimeout: 10 * time.Second}
}

// Validate names the first invalid field.
func (c Config) Validate() error {
	switch {
	case c.HostPort == "":
		return errors.New("temporal.host_port: empty")
	case c.Namespace == "":
		return errors.New("temporal.namespace: empty")
	case c.StartTimeout <= 0:
		return fmt.Errorf("temporal.start_timeout: %s, want > 0", c.StartTimeout)
	}
	return nil
}

// Temporal starts workflows through one SDK client.
type Temporal struct {
	c       client.Client
	timeout time.Duration
}

// New wraps an SDK client (the caller dials it and closes it).
func New(c client.Client, cfg Config) *Temporal {
	return &Temporal{c: c, timeout: cfg.StartTimeout}
}

// Start starts the workflow, or finds it already started.
func (t *Temporal) Start(ctx context.Context, req processor.StartRequest) (processor.StartResult, error) {
	ctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	run, err := t.c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                    req.WorkflowID,
		TaskQueue:             req.TaskQueue,
		WorkflowIDReusePolicy: ReusePolicy(req.ReusePolicy),
		// Never attach to or terminate a running execution: a duplicate
		// start must fail so that it is counted as one.
		WorkflowIDConflictPolicy:                 enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
		WorkflowExecutionErrorWhenAlreadyStarted: true,
	}, req.WorkflowType, req.Input)
	var already *serviceerror.WorkflowExecutionAlreadyStarted
	switch {
	case err == nil:
		return processor.StartResult{RunID: run.GetRunID()}, nil
	case errors.As(err, &already):
		return processor.StartResult{RunID: already.RunId, AlreadyStarted: true}, nil
	}
	err = fmt.Errorf("starting workflow %s: %w", req.WorkflowID, err)
	if Permanent(err) {
		return processor.StartResult{}, processor.Permanent(err)
	}
	return processor.StartResult{}, err
}

// ReusePolicy maps a route's policy to Temporal's enum.
func ReusePolicy(p processor.ReusePolicy) enumspb.WorkflowIdReusePolicy {
	switch p {
	case processor.ReuseAllowDuplicate:
		return enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE
	case processor.ReuseAllowDuplicateFailedOnly:
		return enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE_FAILED_ONLY
	}
	return enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE
}

// Permanent reports whether a start error will not go away by retrying.
func Permanent(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	switch serviceerror.ToStatus(err).Code() {
	case codes.InvalidArgument, codes.NotFound, codes.PermissionDenied, codes.Unauthenticated,
		codes.Unimplemented, codes.FailedPrecondition, codes.OutOfRange:
		return true
	}
	return false
}
