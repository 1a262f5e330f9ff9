package starter

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/dedupio/dedup/processor"
	"github.com/dedupio/dedup/processor/decide"
)

// frontend answers GetSystemInfo, and StartWorkflowExecution and
// DescribeWorkflowExecution with err: a Temporal frontend when err is a
// typed service error sent as the server sends it (serviceerror.ToStatus,
// details included), a gRPC-aware proxy when it is a bare status.
type frontend struct {
	workflowservice.UnimplementedWorkflowServiceServer
	err error
}

func (f *frontend) GetSystemInfo(context.Context, *workflowservice.GetSystemInfoRequest) (*workflowservice.GetSystemInfoResponse, error) {
	return &workflowservice.GetSystemInfoResponse{}, nil
}

func (f *frontend) StartWorkflowExecution(context.Context, *workflowservice.StartWorkflowExecutionRequest) (*workflowservice.StartWorkflowExecutionResponse, error) {
	return nil, f.err
}

func (f *frontend) DescribeWorkflowExecution(context.Context, *workflowservice.DescribeWorkflowExecutionRequest) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	return nil, f.err
}

// temporalSays is err as a Temporal server sends it.
func temporalSays(err error) error { return serviceerror.ToStatus(err).Err() }

// serveGRPC is a gRPC server on 127.0.0.1 (plaintext) with fe registered,
// or no service at all when fe is nil.
func serveGRPC(t *testing.T, fe *frontend) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	if fe != nil {
		workflowservice.RegisterWorkflowServiceServer(s, fe)
	}
	go func() { _ = s.Serve(l) }()
	t.Cleanup(s.Stop)
	return l.Addr().String()
}

// serveHTTP is an HTTP server on 127.0.0.1 that speaks HTTP/2 without TLS
// (as gRPC dials it) and answers every request with code and a text body,
// as an ingress or load balancer without a route to Temporal does.
func serveHTTP(t *testing.T, code int) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	srv := &http.Server{Protocols: &protocols, ReadHeaderTimeout: 5 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, http.StatusText(code), code)
		})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return l.Addr().String()
}

// dial is the starter on a real SDK client of addr.
func dial(t *testing.T, addr string) *Temporal {
	t.Helper()
	c, err := client.NewLazyClient(client.Options{HostPort: addr, Namespace: "default",
		Logger: tlog.NewStructuredLogger(slog.New(slog.DiscardHandler))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return New(c, Config{Namespace: "default", StartTimeout: 10 * time.Second})
}

// A proxy's error is not Temporal's verdict: what answers in front of
// Temporal (an ingress that has no route, a gRPC server that is not a
// Temporal frontend, a proxy that says NotFound without Temporal's
// details) must not dead-letter the event (Start) nor mean "the workflow
// is unknown" (LastRun): it is transient, the router waits. What Temporal
// itself refuses, with its typed errors, stays permanent. Real servers on
// 127.0.0.1, dialled by the SDK's client.
func TestProxyErrorsAreNotTemporalsVerdict(t *testing.T) {
	for _, tc := range []struct {
		name      string
		addr      func(t *testing.T) string
		code      codes.Code
		text      string // in the error
		permanent bool
	}{
		{"ingress answering HTTP 404", func(t *testing.T) string { return serveHTTP(t, http.StatusNotFound) },
			codes.Unimplemented, "unexpected HTTP status code received from server: 404 (Not Found)", false},
		{"gRPC server without Temporal's service", func(t *testing.T) string { return serveGRPC(t, nil) },
			codes.Unimplemented, "unknown service temporal.api.workflowservice.v1.WorkflowService", false},
		{"gRPC Unimplemented without details", func(t *testing.T) string {
			return serveGRPC(t, &frontend{err: status.Error(codes.Unimplemented, "no route")})
		}, codes.Unimplemented, "no route", false},
		{"gRPC NotFound without details (a proxy)", func(t *testing.T) string {
			return serveGRPC(t, &frontend{err: status.Error(codes.NotFound, "no healthy upstream")})
		}, codes.NotFound, "no healthy upstream", false},

		// Temporal's own verdicts, over the same wire.
		{"Temporal: workflow not found", func(t *testing.T) string {
			return serveGRPC(t, &frontend{err: temporalSays(serviceerror.NewNotFound("workflow not found for ID: wf-1"))})
		}, codes.NotFound, "workflow not found", true},
		{"Temporal: namespace not found", func(t *testing.T) string {
			return serveGRPC(t, &frontend{err: temporalSays(serviceerror.NewNamespaceNotFound("orders"))})
		}, codes.NotFound, "orders", true},
		{"Temporal: invalid argument", func(t *testing.T) string {
			return serveGRPC(t, &frontend{err: temporalSays(serviceerror.NewInvalidArgument("WorkflowId exceeds length limit"))})
		}, codes.InvalidArgument, "length limit", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := dial(t, tc.addr(t))
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, startErr := s.Start(ctx, decide.StartRequest{WorkflowID: "wf-1", WorkflowType: "W", TaskQueue: "q"})
			_, runErr := s.LastRun(ctx, "", "wf-1")
			for _, c := range []struct {
				call string
				err  error
			}{{"Start", startErr}, {"LastRun", runErr}} {
				switch {
				case c.err == nil:
					t.Fatalf("%s: no error", c.call)
				case errors.Is(c.err, context.DeadlineExceeded):
					t.Fatalf("%s: %v: the server's answer did not come back", c.call, c.err)
				case serviceerror.ToStatus(c.err).Code() != tc.code || !strings.Contains(c.err.Error(), tc.text):
					t.Errorf("%s: %v (code %s), want code %s and %q", c.call, c.err, serviceerror.ToStatus(c.err).Code(), tc.code, tc.text)
				}
				if got := processor.IsPermanent(c.err); got != tc.permanent {
					t.Errorf("%s: %v: permanent %v, want %v", c.call, c.err, got, tc.permanent)
				}
			}
		})
	}
}
