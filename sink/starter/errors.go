package starter

import (
	"context"
	"errors"

	"go.temporal.io/api/errordetails/v1"
	"go.temporal.io/api/serviceerror"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// IsPermanent reports whether a start error will not go away by retrying.
// It is the one place where start errors are classified: Start marks the
// errors it accepts with processor.Permanent (the record is dead-lettered);
// every other error is retried by the router, with backoff, for as long as
// it runs (and the router reports Temporal as down meanwhile). LastRun
// marks its errors by the same rule; the router reads a permanent one as
// "Temporal does not know the workflow".
//
// The question asked of each error is "does waiting heal it?", and the
// cost of a wrong answer is asymmetric: a transient error taken for
// permanent dead-letters every record that meets it (during a namespace
// failover, the whole stream until an operator replays the dead letters),
// while a permanent error taken for transient only stalls the router,
// loudly, until someone fixes the cause.
//
// IsPermanent means Temporal itself said so. Whatever stands between dedup
// and Temporal (an ingress, a load balancer, a service mesh, a gRPC proxy)
// can answer with a gRPC status of its own: grpc-go turns an HTTP answer
// that is not gRPC into a code (404 into Unimplemented, with "unexpected
// HTTP status code received from server: 404 (Not Found)"; 400 into
// Internal, 401 Unauthenticated, 403 PermissionDenied, 429, 502, 503 and
// 504 Unavailable, anything else Unknown), and a proxy without a route or
// an upstream may say NotFound or Unimplemented itself. None of these is a
// verdict on the record: every record meets them until the path to
// Temporal is fixed, so they wait. Temporal's own errors of the codes a
// proxy uses carry Temporal's typed details (serviceerror's NotFound and
// NamespaceNotFound send a NotFoundFailure or NamespaceNotFoundFailure,
// NewerBuildExists a NewerBuildExistsFailure; serviceerror.FromStatus
// turns a status without them into a bare NotFound, or a plain status
// error), so a NotFound or OutOfRange is permanent only with them.
// Unimplemented is never permanent: Temporal does not answer it for
// StartWorkflowExecution or DescribeWorkflowExecution, which every
// frontend serves, so it comes from something that is not a Temporal
// frontend (an ingress 404, a gRPC server without Temporal's service).
// InvalidArgument and FailedPrecondition carry no details even from
// Temporal; no proxy or transport produces them, so they are taken as
// Temporal's. So:
//
// Transient (false):
//   - context.Canceled, context.DeadlineExceeded and their gRPC codes: the
//     attempt ended, the request was not judged.
//   - serviceerror.NamespaceNotActive (FailedPrecondition): this cluster
//     is the standby for the namespace; during a failover that is a
//     matter of seconds to minutes, and the SDK or a re-dial reaches the
//     active one.
//   - serviceerror.NamespaceInvalidState (FailedPrecondition): the
//     namespace is not in a state that takes starts (not Registered). It
//     is a property of the namespace, not of the record: every record
//     meets it, and the state is changed by an operator, not by the
//     request, so stalling beats dead-lettering the stream.
//   - serviceerror.NamespaceUnavailable, and Unavailable in general
//     (including the server's "namespace replication in handover state",
//     and an HTTP 429, 502, 503 or 504 from a proxy).
//   - serviceerror.WorkflowNotReady (FailedPrecondition): "not yet", by
//     definition.
//   - Unauthenticated and PermissionDenied: the credentials (an API key,
//     a client certificate) or the grants of this deployment, not the
//     record. An API key expires, a certificate is rotated late, a grant
//     is revoked: every record meets it until someone fixes it, and an
//     API key file or certificate re-read on change heals it without a
//     restart; stalling (Temporal reported down) beats dead-lettering the
//     stream.
//   - Unimplemented, with or without details: not a Temporal frontend's
//     answer to these calls (above).
//   - NotFound and OutOfRange without Temporal's details: a proxy's.
//   - A run's own limits (InvalidArgument with the server's message:
//     runlimits.go): the run continues as new, or the server ends it and
//     the retry meets the next run.
//   - A search attribute of dedup's that the namespace does not define,
//     or defines with another type (InvalidArgument with the server's
//     "search attribute X is not defined", "invalid value for search
//     attribute X of type Y", or under SQL visibility "Namespace N has no
//     mapping defined for search attribute X" or "... for field name F":
//     searchattrs.go): the
//     namespace's, healed by creating or fixing it (or by the frontend's
//     namespace cache catching up with an attribute just created).
//   - ResourceExhausted, Internal, Aborted, DataLoss, Unknown, and any
//     error that is not a gRPC or Temporal service error (connection
//     resets and the like).
//
// Permanent (true):
//   - serviceerror.NamespaceNotFound (NotFound, with its details): an
//     unknown namespace is a configuration error that waiting does not
//     heal. A failover does not produce it: a namespace must be replicated
//     to a cluster before it can become active there, so a failing-over
//     namespace answers NamespaceNotActive or Unavailable (handover) until
//     it is served. The one NotFound window that waiting would close is a
//     namespace that is being registered while routers already send to it
//     (the server caches the miss for a few seconds): that is a deployment
//     ordering error, and the dead letters it leaves can be replayed
//     (dedup dlq replay).
//   - serviceerror.NotFound with Temporal's NotFoundFailure details (for
//     LastRun: the workflow is unknown, its retention passed), and
//     NewerBuildExists (OutOfRange, with its details).
//   - InvalidArgument, except a run's own limits (the signal count, the
//     history's size and length: runlimits.go), which heal.
//   - FailedPrecondition other than the cases above:
//     ClientVersionNotSupported and ServerVersionNotSupported (a deploy
//     that waiting does not fix) and the generic serviceerror
//     FailedPrecondition, whose meaning (gRPC) is "do not retry until the
//     system state is explicitly fixed". A bare gRPC FailedPrecondition
//     without Temporal's details (a proxy that strips them) is taken as
//     generic: without the details a failover cannot be told apart.
func IsPermanent(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var (
		notActive    *serviceerror.NamespaceNotActive
		invalidState *serviceerror.NamespaceInvalidState
		unavailable  *serviceerror.NamespaceUnavailable
		notReady     *serviceerror.WorkflowNotReady
	)
	switch {
	case errors.As(err, &notActive), errors.As(err, &invalidState),
		errors.As(err, &unavailable), errors.As(err, &notReady):
		return false
	}
	if RunLimit(err) != "" {
		return false // a run's own limit: the next run takes it (runlimits.go)
	}
	if namespaceRefusesSearchAttributes(err) {
		return false // the namespace's, not the record's (searchattrs.go)
	}
	st := serviceerror.ToStatus(err)
	switch st.Code() {
	case codes.InvalidArgument, codes.FailedPrecondition:
		return true
	case codes.NotFound, codes.OutOfRange:
		return fromTemporal(st)
	}
	return false
}

// fromTemporal reports whether st carries the typed details that
// Temporal's own NotFound, NamespaceNotFound and NewerBuildExists errors
// always send (a proxy's status of the same code has none).
func fromTemporal(st *status.Status) bool {
	for _, d := range st.Details() {
		switch d.(type) {
		case *errordetails.NotFoundFailure, *errordetails.NamespaceNotFoundFailure, *errordetails.NewerBuildExistsFailure:
			return true
		}
	}
	return false
}
