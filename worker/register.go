package worker

import (
	"fmt"

	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// Register registers the workflows and activities on w. It refuses task
// types without a name, with a name that is not [A-Za-z0-9_.-]+ (it is
// part of task IDs), or whose name is taken.
func Register(w worker.Registry, acts *Activities) error {
	seen := map[string]bool{"webhook": true, "noop": true}
	for _, t := range acts.Tasks {
		switch {
		case !taskName.MatchString(t.name):
			return fmt.Errorf("task type %q: want a name of letters, digits, '_', '.' or '-'", t.name)
		case seen[t.name]:
			return fmt.Errorf("task type %q: registered twice (or a built-in)", t.name)
		case t.run == nil:
			return fmt.Errorf("task type %q: no function (use NewTaskType)", t.name)
		}
		seen[t.name] = true
	}
	w.RegisterWorkflowWithOptions(RunActivityWorkflow, workflow.RegisterOptions{Name: RunActivityWorkflowName})
	w.RegisterWorkflowWithOptions(TaskInstanceWorkflow, workflow.RegisterOptions{Name: TaskInstanceWorkflowName})
	w.RegisterActivity(acts)
	return nil
}
