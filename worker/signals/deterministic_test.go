package signals

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
	"testing"
)

// The Receiver runs inside workflows, which Temporal replays: its files
// may not reach for the wall clock, randomness, goroutines or channels of
// their own (as worker/workflow.go may not). A change that does fails
// here, before a replay does.
func TestReceiverStaysDeterministic(t *testing.T) {
	allowed := map[string]bool{"encoding/json": true, "fmt": true, "time": true, "go.temporal.io/sdk/workflow": true,
		"github.com/dedupio/dedup/schemas": true} // types only, as worker/workflow.go
	nondeterministic := map[string]bool{"Now": true, "Since": true, "Until": true, "Sleep": true, "After": true,
		"AfterFunc": true, "Tick": true, "NewTicker": true, "NewTimer": true}
	for _, file := range []string{"receiver.go", "event.go"} {
		f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if !allowed[path] {
				t.Errorf("%s imports %s: workflow code may not", file, path)
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.GoStmt:
				t.Errorf("%s starts a goroutine: use workflow.Go", file)
			case *ast.ChanType:
				t.Errorf("%s uses a channel: use workflow.Channel", file)
			case *ast.SelectorExpr:
				if x, ok := n.X.(*ast.Ident); ok && x.Name == "time" && nondeterministic[n.Sel.Name] {
					t.Errorf("%s calls time.%s: use workflow.Now or workflow.NewTimer", file, n.Sel.Name)
				}
			}
			return true
		})
	}
}
