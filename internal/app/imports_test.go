package app

import (
	"os/exec"
	"strings"
	"testing"
)

// The composition root is the top floor: in dedup's module nothing but
// cmd/dedup imports it. The operators' commands and the ingress take the
// config from internal/config and their clients from internal/dial.
func TestOnlyCmdDedupImportsTheCompositionRoot(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}} {{join .TestImports " "}} {{join .XTestImports " "}}`,
		"github.com/dedupio/dedup/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const root = "github.com/dedupio/dedup/internal/app"
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) == 0 || f[0] == root || f[0] == "github.com/dedupio/dedup/cmd/dedup" {
			continue
		}
		for _, imp := range f[1:] {
			if imp == root {
				t.Errorf("%s imports %s", f[0], root)
			}
		}
	}
	if len(lines) < 30 {
		t.Fatalf("go list printed %d packages: the check checks nothing", len(lines))
	}
}
