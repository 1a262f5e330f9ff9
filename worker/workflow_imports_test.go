package worker

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
	"testing"
)

// workflow.go holds workflow code only, which Temporal replays and which
// must therefore be deterministic: no database or network client (those
// are activities, activities.go), no wall clock, no randomness, no
// goroutines or channels of its own (workflow.Go, workflow.Channel). A
// change that reaches for one fails here, before a replay does.
func TestWorkflowFileStaysDeterministic(t *testing.T) {
	// time for durations only: the calls are checked below.
	allowed := map[string]bool{
		"encoding/json": true, "errors": true, "fmt": true, "time": true,
		"go.temporal.io/api/common/v1": true, "go.temporal.io/api/enums/v1": true,
		"go.temporal.io/sdk/converter": true, "go.temporal.io/sdk/temporal": true, "go.temporal.io/sdk/workflow": true,
		"github.com/dedupio/dedup/schemas": true,
	}
	nondeterministic := map[string]bool{"Now": true, "Since": true, "Until": true, "Sleep": true, "After": true,
		"AfterFunc": true, "Tick": true, "NewTicker": true, "NewTimer": true}
	f, err := parser.ParseFile(token.NewFileSet(), "workflow.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range f.Imports {
		path, _ := strconv.Unquote(imp.Path.Value)
		if !allowed[path] {
			t.Errorf("workflow.go imports %s: workflow code may not (an activity's dependency belongs in activities.go)", path)
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.GoStmt:
			t.Errorf("workflow.go starts a goroutine: use workflow.Go")
		case *ast.ChanType:
			t.Errorf("workflow.go uses a channel: use workflow.Channel")
		case *ast.SelectorExpr:
			if x, ok := n.X.(*ast.Ident); ok && x.Name == "time" && nondeterministic[n.Sel.Name] {
				t.Errorf("workflow.go calls time.%s: use workflow.Now, workflow.Sleep or workflow.NewTimer", n.Sel.Name)
			}
		}
		return true
	})
}
