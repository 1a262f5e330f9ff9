// Package starter starts dedup's workflows in Temporal.
//
// Every start carries the deterministic workflow ID, the route's ID reuse
// policy and WorkflowExecutionErrorWhenAlreadyStarted, so that Temporal
// itself is the final guard: a start that was already made (by a crashed
// router, a re-drive, or a retried RPC whose first attempt did reach the
// server) comes back as "already started", which is success.
//
// A signal route's delivery (decide.StartRequest.Signal) is one
// SignalWithStartWorkflowExecution to the entity workflow, with a request
// ID per delivery key (SignalRequestID), which Temporal records in the run
// it signals and so drops a re-sent delivery within that run (not across
// continue-as-new or a new run: docs/signals.md).
//
// Errors are classified once, here (Permanent): unavailable, throttled,
// timed out and internal errors, a namespace that is failing over, and
// whatever a proxy or load balancer in front of Temporal answers (an HTTP
// 404 that gRPC reports as Unimplemented, a NotFound without Temporal's
// details) are transient (the router retries them); invalid arguments,
// unknown namespaces and invalid requests, as Temporal itself reports
// them, are permanent (processor.Permanent: the record is dead-lettered).
package starter

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/propagation"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/dedupio/dedup/connect/clienttls"
	"github.com/dedupio/dedup/connect/dialguard"
	"github.com/dedupio/dedup/processor"
	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/schemas"
)

var _ processor.Starter = (*Temporal)(nil)

// Config says how to reach Temporal.
type Config struct {
	HostPort string `yaml:"host_port"`
	// Namespace is where workflows start unless their route names its own
	// (routes[].namespace).
	Namespace string `yaml:"namespace"`
	// StartTimeout bounds one start attempt (the SDK retries transient gRPC
	// errors inside it); the router retries past it with backoff.
	StartTimeout time.Duration `yaml:"start_timeout"`
	// TLS is the connection's TLS: a client certificate and key for
	// mutual TLS (Temporal Cloud's namespace endpoints, a self-hosted
	// frontend with requireClientAuth), the CA of a private server, the
	// server name. The files are read again when they change.
	TLS clienttls.Config `yaml:"tls"`
	// APIKey authenticates every call with an API key (Temporal Cloud);
	// TLS is on whenever a key is set. APIKeyFile is the same from a file,
	// read again when it changes (a rotated key needs no restart). Set
	// one of the two, or neither.
	APIKey     string `yaml:"api_key"`
	APIKeyFile string `yaml:"api_key_file"`
	// AllowInsecure lets the API key go to a server not on this machine
	// over TLS that does not verify it (tls.insecure_skip_verify): anyone
	// on the path could pose as Temporal and read the key. Validate
	// refuses that without it. As postgres.allow_insecure.
	AllowInsecure bool `yaml:"allow_insecure"`
	// Compression is the gRPC compression of requests to Temporal: none
	// (the default) or gzip (the SDK's own default). A start request is
	// about a kilobyte plus the event's data; gzipping it and the answer
	// was about half of the client's CPU per start in the benchmark, to
	// save a few hundred bytes. Choose gzip for large event data over a
	// link whose bytes cost more than CPU.
	Compression string `yaml:"compression"`
	// RunLimitWait is how long an entity's run may refuse deliveries by
	// Temporal's signal limit (history.maximumSignalsPerExecution) before
	// the router reports each of its waiting deliveries as stuck (a
	// warning and a transient start error, once each). Until the run
	// continues as new, the entity's deliveries are parked without a
	// start worker and one of them asks Temporal again every 1 to 30 s:
	// backpressure on that entity only, not on Temporal, the partition or
	// the start workers. Never dead-lettered: the run heals when its
	// worker reads its signals and continues as new (docs/signals.md).
	RunLimitWait time.Duration `yaml:"run_limit_wait"`
	// SearchAttributes says whether every run dedup starts carries its
	// search attributes (searchattrs.go: DedupEventId, DedupKafkaTopic,
	// …), by which an operator finds a record's runs: on (the default;
	// start-up stops, naming the command that creates them, if a
	// namespace lacks one), auto (sent only if every namespace has them
	// all), off (none). A bool is on or off.
	SearchAttributes SearchAttributesMode `yaml:"search_attributes"`
}

// Compression names the SDK's gRPC compression of name (temporal.compression):
// "none" or "" is none, "gzip" is gzip; anything else is nil.
func Compression(name string) client.GrpcCompression {
	switch name {
	case "", "none":
		return &client.GrpcCompressionNone{}
	case "gzip":
		return &client.GrpcCompressionGzip{}
	}
	return nil
}

// DefaultConfig points at a local Temporal.
func DefaultConfig() Config {
	return Config{HostPort: "127.0.0.1:7233", Namespace: "default", StartTimeout: 10 * time.Second, Compression: "none",
		RunLimitWait: time.Minute, SearchAttributes: SearchAttributesOn}
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
	case c.RunLimitWait < 0:
		return fmt.Errorf("temporal.run_limit_wait: %s, want >= 0", c.RunLimitWait)
	case c.APIKey != "" && c.APIKeyFile != "":
		return errors.New("temporal.api_key, api_key_file: set one, not both")
	case Compression(c.Compression) == nil:
		return fmt.Errorf("temporal.compression: %q, want none or gzip", c.Compression)
	}
	if err := c.SearchAttributes.validate(); err != nil {
		return err
	}
	if err := c.TLS.Validate("temporal.tls"); err != nil {
		return err
	}
	if (c.APIKey != "" || c.APIKeyFile != "") && c.TLS.InsecureSkipVerify && !c.AllowInsecure {
		host, _, err := net.SplitHostPort(c.HostPort)
		if err != nil {
			host = c.HostPort
		}
		if !dialguard.LoopbackHost(host) {
			return fmt.Errorf("temporal.tls.insecure_skip_verify: the API key would go to %s without verifying who it is: "+
				"drop it (temporal.tls.ca_file for a private CA), or accept the risk with temporal.allow_insecure: true", c.HostPort)
		}
	}
	return nil
}

// Temporal starts workflows through one SDK client's gRPC service.
type Temporal struct {
	c         client.Client
	namespace string
	timeout   time.Duration
	identity  string
	dc        converter.DataConverter
	gate      *runGate
	// attrs: runs carry search attributes (temporal.search_attributes is
	// not off; auto is resolved at start-up).
	attrs bool
	prop  propagation.TextMapPropagator // tracing.go; nil: no trace header
}

// New wraps an SDK client (the caller dials it and closes it). cfg's
// Namespace is the default of requests that name none; every request
// carries its namespace, so one client serves every route's. A gRPC
// interceptor of the client's own sees a start's answer as the starter
// reads it (startresponse.go): its run ID, first run ID, started and
// status, and its link to the started event among its unknown fields,
// whole but unread.
func New(c client.Client, cfg Config) *Temporal {
	host, _ := os.Hostname()
	return &Temporal{c: c, namespace: cfg.Namespace, timeout: cfg.StartTimeout,
		identity: fmt.Sprintf("dedup@%s:%d", host, os.Getpid()), dc: converter.GetDefaultDataConverter(),
		gate: &runGate{wait: cfg.RunLimitWait, m: map[string]*gated{}}, attrs: cfg.SearchAttributes != SearchAttributesOff}
}

// requestID is RequestID under the allow_* policies, where it is what
// keeps a re-driven claim from creating a second run. Under
// reject_duplicate the policy itself refuses any second run, and a fresh
// request ID per call (as the SDK does) keeps "already started" exact:
// Temporal reports a start deduplicated by request ID as started.
func requestID(req decide.StartRequest) string {
	if req.ReusePolicy == decide.ReuseRejectDuplicate || req.ReusePolicy == "" {
		return uuid.NewString()
	}
	return RequestID(req.WorkflowID, req.Generation)
}

// requestIDSpace namespaces dedup's request IDs (a fixed random UUID).
var requestIDSpace = uuid.MustParse("5d1f3c0e-8f7a-4a55-9b0e-6c2d7e9a41b3")

// Start starts the workflow, or finds it already started (by this claim,
// or by any start the reuse policy refuses to repeat).
//
// It calls the service directly rather than client.ExecuteWorkflow: the
// SDK does not let a caller choose the request ID.
func (t *Temporal) Start(ctx context.Context, req decide.StartRequest) (processor.StartResult, error) {
	if req.Signal != nil {
		// An entity whose run is full is not asked (but by its probe):
		// the delivery is answered at once, for the router to park.
		entity := t.ns(req.Namespace) + "/" + req.Signal.WorkflowID
		probe, wait := t.gate.enter(entity)
		if wait != nil {
			return processor.StartResult{}, wait
		}
		ctx, cancel := context.WithTimeout(ctx, t.timeout)
		defer cancel()
		res, err := t.signalWithStart(ctx, req)
		return res, t.gate.leave(entity, probe, err)
	}
	ctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	sreq, err := t.startRequest(ctx, req)
	if err != nil {
		return processor.StartResult{}, err
	}
	resp, err := t.c.WorkflowService().StartWorkflowExecution(ctx, sreq, startCall)
	var already *serviceerror.WorkflowExecutionAlreadyStarted
	switch {
	case err == nil:
		// A start Temporal deduplicated by request ID (an earlier attempt
		// of this claim made the run) is reported as started too: under
		// the allow_* policies, dedup_workflow_starts_total{result=
		// "started"} counts re-driven starts again.
		return processor.StartResult{RunID: resp.GetRunId(), AlreadyStarted: !resp.GetStarted()}, nil
	case errors.As(err, &already):
		return processor.StartResult{RunID: already.RunId, AlreadyStarted: true}, nil
	}
	err = fmt.Errorf("starting workflow %s: %w", req.WorkflowID, err)
	if IsPermanent(err) {
		return processor.StartResult{}, processor.Permanent(err)
	}
	return processor.StartResult{}, err
}

// startRequest is req's StartWorkflowExecutionRequest: its errors are
// Permanent (a request that cannot be encoded never can be).
func (t *Temporal) startRequest(ctx context.Context, req decide.StartRequest) (*workflowservice.StartWorkflowExecutionRequest, error) {
	input, err := encodeInput(t.dc, &req.Input)
	if err != nil {
		return nil, processor.Permanent(fmt.Errorf("encoding input of workflow %s: %w", req.WorkflowID, err))
	}
	attrs, err := t.searchAttributes(req)
	if err != nil {
		return nil, processor.Permanent(err)
	}
	return &workflowservice.StartWorkflowExecutionRequest{
		Namespace:    t.ns(req.Namespace),
		WorkflowId:   req.WorkflowID,
		WorkflowType: &commonpb.WorkflowType{Name: req.WorkflowType},
		TaskQueue:    &taskqueuepb.TaskQueue{Name: req.TaskQueue, Kind: enumspb.TASK_QUEUE_KIND_NORMAL},
		Input:        input,
		// The run says which generation it is: LastRun reads it back, so
		// a re-run starts after the newest run Temporal has, whatever the
		// ledger recorded.
		Memo:                  &commonpb.Memo{Fields: map[string]*commonpb.Payload{schemas.MemoGeneration: generationPayload(max(req.Generation, 1))}},
		SearchAttributes:      attrs,
		Identity:              t.identity,
		RequestId:             requestID(req),
		WorkflowIdReusePolicy: ReusePolicy(req.ReusePolicy),
		// Never attach to or terminate a running execution: a duplicate
		// start must fail so that it is counted as one.
		WorkflowIdConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
		Header:                   traceHeader(ctx, t.prop),
	}, nil
}

// SignalRequestID is the request ID of every SignalWithStart of one
// delivery (its ledger key, signal-{route}:{event_id}): a name-based UUID,
// the same on every retry and re-drive. Temporal (v1.32) records a
// signal's request ID in the run that received it (the run SignalWithStart
// started included) and drops a signal whose request ID that run has
// recorded: so a re-driven delivery (a crash between the signal and the
// mark) is not signalled twice into one run. The record is per run: a run
// that continued as new, or a new run after the entity closed, does not
// have it (docs/signals.md).
func SignalRequestID(deliveryKey string) string {
	return uuid.NewSHA1(signalRequestIDSpace, []byte(deliveryKey)).String()
}

// signalRequestIDSpace namespaces deliveries' request IDs (a fixed random
// UUID, other than requestIDSpace: a delivery key and a workflow ID never
// share a request ID).
var signalRequestIDSpace = uuid.MustParse("0b8f6f1e-2c47-4f0e-9a53-7d1e5c3a9b64")

// signalWithStart delivers a signal route's event: it signals the entity
// workflow's open run, or starts one (the route's workflow type, task
// queue and reuse policy, no input) with the signal as its first event.
// The request ID is SignalRequestID's.
//
// If the entity's last run is closed and the reuse policy refuses a new
// run, Temporal answers "already started": the event cannot be delivered
// (permanent: dead-lettered as temporal_permanent), unless that closed run
// was started by this very delivery (its start carries our request ID; a
// re-drive after the run got the signal and closed): that is success.
func (t *Temporal) signalWithStart(ctx context.Context, req decide.StartRequest) (processor.StartResult, error) {
	sig := req.Signal
	input, err := t.dc.ToPayloads(sig.Input)
	if err != nil {
		return processor.StartResult{}, processor.Permanent(fmt.Errorf("encoding signal of workflow %s: %w", sig.WorkflowID, err))
	}
	rid := SignalRequestID(req.WorkflowID)
	attrs, err := t.searchAttributes(req)
	if err != nil {
		return processor.StartResult{}, processor.Permanent(err)
	}
	resp, err := t.c.WorkflowService().SignalWithStartWorkflowExecution(ctx, &workflowservice.SignalWithStartWorkflowExecutionRequest{
		Namespace:             t.ns(req.Namespace),
		WorkflowId:            sig.WorkflowID,
		WorkflowType:          &commonpb.WorkflowType{Name: req.WorkflowType},
		TaskQueue:             &taskqueuepb.TaskQueue{Name: req.TaskQueue, Kind: enumspb.TASK_QUEUE_KIND_NORMAL},
		Identity:              t.identity,
		RequestId:             rid,
		WorkflowIdReusePolicy: ReusePolicy(req.ReusePolicy),
		// Signal the open run; never fail or terminate it (FAIL is
		// refused for SignalWithStart anyway).
		WorkflowIdConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		SignalName:               sig.Name,
		SignalInput:              input,
		SearchAttributes:         attrs,
		Header:                   traceHeader(ctx, t.prop),
	})
	var already *serviceerror.WorkflowExecutionAlreadyStarted
	switch {
	case err == nil:
		return processor.StartResult{RunID: resp.GetRunId(), AlreadyStarted: !resp.GetStarted()}, nil
	case errors.As(err, &already) && already.StartRequestId == rid:
		return processor.StartResult{RunID: already.RunId, AlreadyStarted: true}, nil
	case errors.As(err, &already):
		return processor.StartResult{}, processor.Permanent(fmt.Errorf("delivering event %s to workflow %s: its last run %s is closed "+
			"and id_reuse_policy %s refuses a new run: %w", sig.Input.EventID, sig.WorkflowID, already.RunId, req.ReusePolicy, err))
	}
	err = fmt.Errorf("signalling workflow %s with start: %w", sig.WorkflowID, err)
	if IsPermanent(err) {
		return processor.StartResult{}, processor.Permanent(err)
	}
	return processor.StartResult{}, err
}

// ns is namespace, or the default when it is empty.
func (t *Temporal) ns(namespace string) string {
	if namespace == "" {
		return t.namespace
	}
	return namespace
}

// LastRun describes the workflow ID's latest run in namespace (empty:
// the default). Its errors are classified as Start's (Permanent): Temporal's
// NotFound, which carries Temporal's details, is permanent (the router
// reads it as "Temporal does not know the workflow"); a proxy's NotFound
// or Unimplemented is transient, never taken for an unknown workflow.
func (t *Temporal) LastRun(ctx context.Context, namespace, workflowID string) (decide.Run, error) {
	ctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	resp, err := t.c.WorkflowService().DescribeWorkflowExecution(ctx, &workflowservice.DescribeWorkflowExecutionRequest{
		Namespace: t.ns(namespace),
		Execution: &commonpb.WorkflowExecution{WorkflowId: workflowID},
	})
	if err != nil {
		err = fmt.Errorf("describing workflow %s: %w", workflowID, err)
		if IsPermanent(err) {
			return decide.Run{}, processor.Permanent(err)
		}
		return decide.Run{}, err
	}
	info := resp.GetWorkflowExecutionInfo()
	run := decide.Run{ID: info.GetExecution().GetRunId()}
	if p := info.GetMemo().GetFields()[schemas.MemoGeneration]; p != nil {
		// A run started before dedup recorded generations has none (0).
		_ = t.dc.FromPayload(p, &run.Generation)
	}
	switch info.GetStatus() {
	case enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING:
	case enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW:
		run.Closed = true
	default: // failed, timed out, terminated, cancelled
		run.Closed, run.Failed = true, true
	}
	return run, nil
}

// ReusePolicy maps a route's policy to Temporal's enum.
func ReusePolicy(p decide.ReusePolicy) enumspb.WorkflowIdReusePolicy {
	switch p {
	case decide.ReuseAllowDuplicate:
		return enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE
	case decide.ReuseAllowDuplicateFailedOnly:
		return enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE_FAILED_ONLY
	}
	return enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE
}
