package worker

import (
	"context"
	"fmt"
	"strconv"
	"strings"

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

// TaskTypeCheck is what CheckTaskTypes found.
type TaskTypeCheck struct {
	// Unknown are the types asked about that this worker has not
	// registered, each once, in the order asked.
	Unknown []string `json:"unknown,omitempty"`
	// Have are the types this worker has: the built-ins, then the
	// registered ones.
	Have []string `json:"have"`
}

// Message is the run's failure when some types are unknown.
func (c TaskTypeCheck) Message() string {
	quoted := make([]string, len(c.Unknown))
	for i, u := range c.Unknown {
		quoted[i] = strconv.Quote(u)
	}
	return fmt.Sprintf("the definition names task type %s, which this worker has not registered (it has %s): "+
		"register it (worker.Register; in dedup worker, worker.tenants for the tenant task types), then re-run the event",
		strings.Join(quoted, ", "), strings.Join(c.Have, ", "))
}

// CheckTaskTypes says which of types this worker cannot run: the workflow
// asks before it starts a run's tasks, so that a definition naming a type
// no worker registered fails the run before any task has an effect. The
// answer is this worker's: workers that poll one task queue should
// register the same task types (RunTask still refuses a type its worker
// lacks). Idempotent: it only reads the registration.
func (a *Activities) CheckTaskTypes(_ context.Context, types []string) (TaskTypeCheck, error) {
	check := TaskTypeCheck{Have: a.taskNames()}
	seen := map[string]bool{}
	for _, t := range types {
		if _, ok := a.taskType(t); !ok && !seen[t] {
			seen[t] = true
			check.Unknown = append(check.Unknown, t)
		}
	}
	return check, nil
}
