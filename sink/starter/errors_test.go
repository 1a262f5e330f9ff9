package starter

import (
	"context"
	"errors"
	"fmt"
	"testing"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// wire sends err through a gRPC status and back, as the SDK receives it
// from the server: the typed error must survive with its details.
func wire(err error) error { return serviceerror.FromStatus(serviceerror.ToStatus(err)) }

func TestIsPermanent(t *testing.T) {
	notActive := serviceerror.NewNamespaceNotActive("ns", "cluster-b", "cluster-a")
	invalidState := serviceerror.NewNamespaceInvalidState("ns", enumspb.NAMESPACE_STATE_DEPRECATED,
		[]enumspb.NamespaceState{enumspb.NAMESPACE_STATE_REGISTERED})
	unavailable := serviceerror.NewNamespaceUnavailable("ns")
	notFound := serviceerror.NewNamespaceNotFound("ns")

	for _, tc := range []struct {
		name      string
		err       error
		permanent bool
	}{
		{"nil", nil, false},

		// Namespace failover: the namespace is healthy somewhere, this
		// cluster is not (yet) serving it. Waiting heals it.
		{"namespace not active", notActive, false},
		{"namespace not active, wrapped", fmt.Errorf("starting workflow wf-1: %w", notActive), false},
		{"namespace not active, over the wire", wire(notActive), false},
		{"namespace not active, over the wire, wrapped", fmt.Errorf("starting workflow wf-1: %w", wire(notActive)), false},
		{"namespace invalid state", invalidState, false},
		{"namespace invalid state, wrapped", fmt.Errorf("x: %w", invalidState), false},
		{"namespace invalid state, over the wire", wire(invalidState), false},
		{"namespace unavailable", unavailable, false},
		{"namespace unavailable, wrapped", fmt.Errorf("x: %w", unavailable), false},
		{"namespace unavailable, over the wire", wire(unavailable), false},
		{"namespace handover (unavailable)", serviceerror.NewUnavailable("Namespace replication in REPLICATION_STATE_HANDOVER state."), false},
		{"workflow not ready", serviceerror.NewWorkflowNotReady("not ready"), false},

		// An unknown namespace is a configuration error.
		{"namespace not found", notFound, true},
		{"namespace not found, wrapped", fmt.Errorf("x: %w", notFound), true},
		{"namespace not found, over the wire", wire(notFound), true},

		// Context ends: the router decides, never a dead letter.
		{"context canceled", context.Canceled, false},
		{"context canceled, wrapped", fmt.Errorf("x: %w", context.Canceled), false},
		{"context deadline", context.DeadlineExceeded, false},
		{"context deadline, wrapped", fmt.Errorf("x: %w", context.DeadlineExceeded), false},
		{"service deadline exceeded", serviceerror.NewDeadlineExceeded("timeout"), false},
		{"service canceled", serviceerror.NewCanceled("canceled"), false},

		// Transient service errors.
		{"unavailable", serviceerror.NewUnavailable("down"), false},
		{"unavailable, wrapped", fmt.Errorf("x: %w", serviceerror.NewUnavailable("down")), false},
		{"resource exhausted", serviceerror.NewResourceExhausted(enumspb.RESOURCE_EXHAUSTED_CAUSE_RPS_LIMIT, "slow down"), false},
		{"resource exhausted, wrapped", fmt.Errorf("x: %w", serviceerror.NewResourceExhausted(enumspb.RESOURCE_EXHAUSTED_CAUSE_CONCURRENT_LIMIT, "slow down")), false},
		{"internal", serviceerror.NewInternal("boom"), false},
		{"system workflow", serviceerror.NewSystemWorkflow(&commonpb.WorkflowExecution{WorkflowId: "w"}, errors.New("boom")), false},
		{"aborted", serviceerror.NewAborted("aborted"), false},
		{"data loss", serviceerror.NewDataLoss("lost"), false},
		{"plain error", errors.New("connection reset"), false},

		// Permanent service errors: Temporal says this request will never
		// succeed.
		{"invalid argument", serviceerror.NewInvalidArgument("bad"), true},
		{"invalid argument, wrapped", fmt.Errorf("x: %w", serviceerror.NewInvalidArgument("bad")), true},
		// Credentials and grants: the deployment's, not the record's
		// (an expired API key must not dead-letter the stream).
		{"permission denied", serviceerror.NewPermissionDenied("no", "reason"), false},
		{"permission denied, wrapped", fmt.Errorf("x: %w", serviceerror.NewPermissionDenied("no", "")), false},
		{"unauthenticated, over the wire", serviceerror.FromStatus(status.New(codes.Unauthenticated, "expired")), false},

		// Temporal's NotFound (workflow unknown) carries its details.
		{"not found", serviceerror.NewNotFound("gone"), true},
		{"not found, wrapped", fmt.Errorf("x: %w", serviceerror.NewNotFound("gone")), true},
		{"not found, over the wire", wire(serviceerror.NewNotFound("gone")), true},
		{"not found, over the wire, wrapped", fmt.Errorf("x: %w", wire(serviceerror.NewNotFound("gone"))), true},
		// A proxy's NotFound has none: not Temporal's verdict.
		{"not found without details, over the wire", serviceerror.FromStatus(status.New(codes.NotFound, "no healthy upstream")), false},
		{"not found without details, wrapped", fmt.Errorf("x: %w", serviceerror.FromStatus(status.New(codes.NotFound, "no healthy upstream"))), false},
		// Unimplemented is never Temporal's answer to a start or a
		// describe: an ingress's 404, a server that is not Temporal.
		{"unimplemented", serviceerror.NewUnimplemented("no"), false},
		{"ingress 404, over the wire", serviceerror.FromStatus(status.New(codes.Unimplemented,
			`unexpected HTTP status code received from server: 404 (Not Found); transport: received unexpected content-type "text/plain; charset=utf-8"`)), false},
		{"ingress 404, wrapped", fmt.Errorf("starting workflow wf-1: %w", serviceerror.FromStatus(status.New(codes.Unimplemented,
			"unexpected HTTP status code received from server: 404 (Not Found)"))), false},
		{"failed precondition, generic", serviceerror.NewFailedPrecondition("no"), true},
		{"failed precondition, generic, wrapped", fmt.Errorf("x: %w", serviceerror.NewFailedPrecondition("no")), true},
		{"client version not supported", serviceerror.NewClientVersionNotSupported("0.1", "go", ">1"), true},
		{"server version not supported", serviceerror.NewServerVersionNotSupported("0.1", ">1"), true},
		{"newer build exists", serviceerror.NewNewerBuildExists("b2"), true},
		{"newer build exists, over the wire", wire(serviceerror.NewNewerBuildExists("b2")), true},

		// Plain gRPC status errors (no Temporal details), bare and wrapped:
		// NotFound, Unimplemented and OutOfRange are a proxy's, not
		// Temporal's; InvalidArgument and FailedPrecondition, which no
		// proxy or transport produces, are taken as Temporal's.
		{"grpc unavailable", status.Error(codes.Unavailable, "down"), false},
		{"grpc unavailable, wrapped", fmt.Errorf("x: %w", status.Error(codes.Unavailable, "down")), false},
		{"grpc resource exhausted", status.Error(codes.ResourceExhausted, "slow"), false},
		{"grpc internal", status.Error(codes.Internal, "boom"), false},
		{"grpc deadline exceeded", status.Error(codes.DeadlineExceeded, "late"), false},
		{"grpc canceled", status.Error(codes.Canceled, "canceled"), false},
		{"grpc aborted", status.Error(codes.Aborted, "aborted"), false},
		{"grpc unknown", status.Error(codes.Unknown, "?"), false},
		{"grpc invalid argument", status.Error(codes.InvalidArgument, "bad"), true},
		{"grpc invalid argument, wrapped", fmt.Errorf("x: %w", status.Error(codes.InvalidArgument, "bad")), true},
		{"grpc permission denied", status.Error(codes.PermissionDenied, "no"), false},
		{"grpc unauthenticated", status.Error(codes.Unauthenticated, "who"), false},
		{"grpc unauthenticated, wrapped", fmt.Errorf("x: %w", status.Error(codes.Unauthenticated, "who")), false},
		{"grpc not found", status.Error(codes.NotFound, "gone"), false},
		{"grpc not found, wrapped", fmt.Errorf("x: %w", status.Error(codes.NotFound, "gone")), false},
		{"grpc unimplemented", status.Error(codes.Unimplemented, "no"), false},
		{"grpc out of range", status.Error(codes.OutOfRange, "no"), false},
		{"grpc failed precondition", status.Error(codes.FailedPrecondition, "no"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := IsPermanent(tc.err); got != tc.permanent {
				t.Errorf("IsPermanent(%T %v) = %v, want %v", tc.err, tc.err, got, tc.permanent)
			}
		})
	}
}
