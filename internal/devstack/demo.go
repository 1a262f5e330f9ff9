package devstack

import (
	"go.temporal.io/sdk/workflow"

	"github.com/dedupio/dedup/schemas"
)

// DemoWorkflowName is what the dev stack's routes start and its demo worker
// runs.
const DemoWorkflowName = "DemoWorkflow"

// DemoWorkflow stands in for a real activity workflow in the dev stack: it
// completes at once with a line naming the event, so that the Temporal UI
// or CLI shows executions completing.
func DemoWorkflow(ctx workflow.Context, in schemas.WorkflowInput) (string, error) {
	workflow.GetLogger(ctx).Debug("demo workflow", "workflow_id", in.WorkflowID, "type", in.Type)
	return "handled " + in.Type + " " + in.EventID + " for activity " + in.ActivityID, nil
}
