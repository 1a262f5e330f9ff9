package devstack

import (
	"context"
	"sync"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/server/temporal"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TemporalFaults makes the embedded Temporal frontend misbehave on
// StartWorkflowExecution for one namespace, for the fault-injection tests:
// refuse starts for a while (Unavailable, ResourceExhausted), or accept
// them and answer late, so that the caller's attempt times out although
// the server started the workflow (a start whose outcome is unknown).
type TemporalFaults struct {
	mu          sync.Mutex
	namespace   string
	refuseUntil time.Time
	refuseCode  codes.Code
	lateCount   int
	lateBy      time.Duration
	refused     int
	answerLate  int
}

// ServerOption installs the faults' interceptor on the frontend.
func (f *TemporalFaults) ServerOption() temporal.ServerOption {
	return temporal.WithChainedFrontendGrpcInterceptors(f.intercept)
}

// Refuse fails every start in namespace with code for d.
func (f *TemporalFaults) Refuse(namespace string, code codes.Code, d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.namespace, f.refuseCode, f.refuseUntil = namespace, code, time.Now().Add(d)
}

// AnswerLate makes the next n starts in namespace succeed on the server and
// answer only after by.
func (f *TemporalFaults) AnswerLate(namespace string, n int, by time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.namespace, f.lateCount, f.lateBy = namespace, n, by
}

// Counts says how many starts were refused and answered late.
func (f *TemporalFaults) Counts() (refused, late int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.refused, f.answerLate
}

// Clear removes every fault.
func (f *TemporalFaults) Clear() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refuseUntil, f.lateCount = time.Time{}, 0
}

func (f *TemporalFaults) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start, ok := req.(*workflowservice.StartWorkflowExecutionRequest)
	if !ok {
		return handler(ctx, req)
	}
	f.mu.Lock()
	if start.GetNamespace() != f.namespace {
		f.mu.Unlock()
		return handler(ctx, req)
	}
	if time.Now().Before(f.refuseUntil) {
		f.refused++
		code := f.refuseCode
		f.mu.Unlock()
		return nil, status.Error(code, "injected fault: start refused")
	}
	late := time.Duration(0)
	if f.lateCount > 0 {
		f.lateCount--
		f.answerLate++
		late = f.lateBy
	}
	f.mu.Unlock()
	resp, err := handler(context.WithoutCancel(ctx), req)
	if late > 0 {
		time.Sleep(late)
	}
	return resp, err
}
