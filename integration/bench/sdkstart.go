package bench

import (
	"context"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/dedupio/dedup/processor/decide"
	"github.com/dedupio/dedup/schemas"
	"github.com/dedupio/dedup/sink/starter"
)

// SDKStarts starts unique workflows the way a hand-written consumer does:
// the Temporal SDK's client.ExecuteWorkflow, at the router's start
// concurrency, over the requests the router would make of a fresh
// unique-heavy workload. Each start asks for what the router's does: the
// workflow ID, type and task queue, the reuse policy, never attaching to a
// running execution, the memo's generation, the search attributes and the
// same input; the SDK's own request ID (random) and data converter. This
// is the bare SDK start issue #43's first target holds the router to;
// RawStarts (the router's starter alone, the WorkflowService called
// directly) is the floor under both.
func (e *Env) SDKStarts(ctx context.Context) (Rate, error) {
	reqs, err := e.uniqueRequests(e.P.RawStarts, "sdk")
	if err != nil {
		return Rate{}, err
	}
	return e.measureStarts(ctx, reqs, func(ctx context.Context, req decide.StartRequest) error {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second) // as the router's starter (StartTimeout)
		defer cancel()
		_, err := e.TC.ExecuteWorkflow(ctx, sdkStartOptions(req), req.WorkflowType, req.Input)
		return err
	})
}

// sdkStartOptions are the SDK's options for req's start, as a user of the
// SDK writes them for what the router's starter sends.
func sdkStartOptions(req decide.StartRequest) client.StartWorkflowOptions {
	in := &req.Input
	var attrs []temporal.SearchAttributeUpdate
	keyword := func(name, v string) {
		if starter.KeywordFits(v) {
			attrs = append(attrs, temporal.NewSearchAttributeKeyKeyword(name).ValueSet(v))
		}
	}
	keyword(starter.AttrEventID, in.EventID)
	keyword(starter.AttrRoute, in.ActivityID)
	keyword(starter.AttrIDRule, in.IDRule)
	if r := req.Record; r != nil {
		keyword(starter.AttrKafkaTopic, r.Topic)
		attrs = append(attrs, temporal.NewSearchAttributeKeyInt64(starter.AttrKafkaPartition).ValueSet(int64(r.Partition)),
			temporal.NewSearchAttributeKeyInt64(starter.AttrKafkaOffset).ValueSet(r.Offset))
	}
	return client.StartWorkflowOptions{
		ID:                       req.WorkflowID,
		TaskQueue:                req.TaskQueue,
		WorkflowIDReusePolicy:    starter.ReusePolicy(req.ReusePolicy),
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
		// A duplicate is an error, as it is to the router's starter.
		WorkflowExecutionErrorWhenAlreadyStarted: true,
		Memo:                                     map[string]any{schemas.MemoGeneration: max(req.Generation, 1)},
		TypedSearchAttributes:                    temporal.NewSearchAttributes(attrs...),
	}
}
