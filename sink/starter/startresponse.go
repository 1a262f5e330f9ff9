package starter

// The start's answer off the wire. A StartWorkflowExecutionResponse is
// read for what the starter uses, without protobuf-go's reflection: the
// server (1.32, the lab's) answers every start with a link to the run's
// started event (three messages, one a oneof), which protobuf-go builds
// field by field and dedup never reads (BenchmarkStartAnswerOffTheWire:
// 850 ns and 12 allocations an answer through gRPC's proto codec, 300 ns
// and 5 here). Its four scalar fields (run ID, first run ID, started, status)
// are read as protobuf-go reads them; every other field, the link and
// the eager workflow task dedup never asks for included, is kept whole
// as the message's unknown bytes: marshalled again, the message is the
// answer's (startresponse_test.go); a gRPC interceptor of the client's
// own finds the link there, unread. Anything protobuf-go reads otherwise
// or refuses (a malformed field, a string that is not UTF-8, one of the
// four fields with another wire type) is left to protobuf-go, whole,
// errors included.

import (
	"unicode/utf8"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"google.golang.org/protobuf/encoding/protowire"
)

// The fields of StartWorkflowExecutionResponse read here.
const (
	answerRunID      = 1
	answerStarted    = 3
	answerStatus     = 5
	answerFirstRunID = 6
)

// readStartResponse sets r from b, a StartWorkflowExecutionResponse's
// bytes, and reports whether it could; when it could not (b is for
// protobuf-go), r is unchanged.
func readStartResponse(b []byte, r *workflowservice.StartWorkflowExecutionResponse) bool {
	var (
		runID, firstRunID string
		started           bool
		status            enumspb.WorkflowExecutionStatus
		rest              []byte // the other fields, as they came
	)
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || num > protowire.MaxValidNumber { // protowire takes a MessageSet's numbers too
			return false
		}
		switch num {
		case answerRunID, answerFirstRunID:
			if typ != protowire.BytesType {
				return false
			}
			v, m := protowire.ConsumeBytes(b[n:])
			if m < 0 || !utf8.Valid(v) {
				return false
			}
			if num == answerRunID {
				runID = string(v)
			} else {
				firstRunID = string(v)
			}
			b = b[n+m:]
		case answerStarted, answerStatus:
			if typ != protowire.VarintType {
				return false
			}
			v, m := protowire.ConsumeVarint(b[n:])
			if m < 0 {
				return false
			}
			if num == answerStarted {
				started = v != 0
			} else {
				status = enumspb.WorkflowExecutionStatus(int32(v)) //nolint:gosec // an enum's varint is its int32, as protobuf-go reads it
			}
			b = b[n+m:]
		default:
			m := protowire.ConsumeFieldValue(num, typ, b[n:])
			if m < 0 {
				return false
			}
			if rest == nil {
				rest = make([]byte, 0, len(b))
			}
			rest = append(rest, b[:n+m]...)
			b = b[n+m:]
		}
	}
	r.Reset()
	r.RunId, r.FirstExecutionRunId, r.Started, r.Status = runID, firstRunID, started, status
	if len(rest) > 0 {
		r.ProtoReflect().SetUnknown(rest)
	}
	return true
}
