package repotest

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// The limits a product file and a product function stay within, so that
// each can be read at once (issue #41).
const (
	maxFileLines = 500
	maxFuncLines = 120
)

// TestProductFilesAndFunctionsStayReadable parses every non-test .go file
// of the root module (outside integration/, which is the lab's module,
// testdata/ folders and other nested modules) and fails for a file over
// maxFileLines lines or a function over maxFuncLines lines. A function's
// lines run from its func keyword to its closing brace (its doc comment is
// not counted); a function literal is measured too, so that a long closure
// assigned to a package variable does not escape. The largest file and
// function are logged, so the margin is visible before it is crossed.
func TestProductFilesAndFunctionsStayReadable(t *testing.T) {
	root := moduleRoot(t)
	fset := token.NewFileSet()
	var files, funcs []sized
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if path != root && skipDir(path, d.Name()) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return fmt.Errorf("parsing %s: %w", rel, err)
		}
		files = append(files, sized{rel, fset.File(f.Pos()).LineCount()})
		ast.Inspect(f, func(n ast.Node) bool {
			switch fn := n.(type) {
			case *ast.FuncDecl:
				if fn.Body != nil {
					funcs = append(funcs, sized{rel + ": " + funcName(fn), lines(fset, fn.Pos(), fn.End())})
				}
			case *ast.FuncLit:
				name := fmt.Sprintf("%s: func literal at line %d", rel, fset.Position(fn.Pos()).Line)
				funcs = append(funcs, sized{name, lines(fset, fn.Pos(), fn.End())})
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatalf("walking the module: %v", err)
	}
	if len(files) < 100 {
		t.Fatalf("found %d product files under %s; the walk misses the module", len(files), root)
	}
	for _, f := range largestFirst(files) {
		if f.lines > maxFileLines {
			t.Errorf("%s has %d lines, over %d: split it by concern, each file named after its rule", f.name, f.lines, maxFileLines)
		}
	}
	for _, f := range largestFirst(funcs) {
		if f.lines > maxFuncLines {
			t.Errorf("%s has %d lines, over %d: give it named steps", f.name, f.lines, maxFuncLines)
		}
	}
	lf, lfn := largestFirst(files)[0], largestFirst(funcs)[0]
	t.Logf("%d product files, %d functions; largest file %s (%d lines), largest function %s (%d lines)",
		len(files), len(funcs), lf.name, lf.lines, lfn.name, lfn.lines)
}

type sized struct {
	name  string
	lines int
}

func largestFirst(s []sized) []sized {
	out := append([]sized(nil), s...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].lines > out[j].lines })
	return out
}

// skipDir says whether a folder holds no product file of the root module:
// the lab, testdata, hidden folders, and any folder with a go.mod of its own.
func skipDir(path, name string) bool {
	if name == "integration" || name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
		return true
	}
	_, err := os.Stat(filepath.Join(path, "go.mod"))
	return err == nil
}

func lines(fset *token.FileSet, from, to token.Pos) int {
	return fset.Position(to).Line - fset.Position(from).Line + 1
}

func funcName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	typ := fn.Recv.List[0].Type
	for {
		switch x := typ.(type) {
		case *ast.StarExpr:
			typ = x.X
			continue
		case *ast.IndexExpr:
			typ = x.X
			continue
		case *ast.IndexListExpr:
			typ = x.X
			continue
		}
		break
	}
	if id, ok := typ.(*ast.Ident); ok {
		return "(" + id.Name + ")." + fn.Name.Name
	}
	return fn.Name.Name
}

// moduleRoot is the folder of the root module's go.mod, above the test's
// working directory.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.HasPrefix(string(b), "module github.com/dedupio/dedup\n") {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod of module github.com/dedupio/dedup above the working directory")
		}
		dir = parent
	}
}
