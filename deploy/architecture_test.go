package deploy

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// ARCHITECTURE.md is the map a newcomer follows: every file and folder it
// names (each rule's row, the diagram, the folders and the links) exists
// in the tree, so that a move or rename that forgets the map fails here
// rather than sending a reader to nothing. A name in the diagram is
// relative to processor/ unless it names its folder.
func TestArchitectureNamesFilesThatExist(t *testing.T) {
	b, err := os.ReadFile("../ARCHITECTURE.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	var named []string
	// The table: | rule | `file` |, one file per row.
	row := regexp.MustCompile("(?m)^\\|[^\\n]*\\| `([^`]+)` \\|$")
	rows := row.FindAllStringSubmatch(doc, -1)
	if len(rows) < 10 {
		t.Fatalf("ARCHITECTURE.md: %d rule rows found, want the table's (the check checks nothing)", len(rows))
	}
	for _, m := range rows {
		named = append(named, m[1])
	}
	// Paths in backquotes elsewhere (folders, packages in prose).
	for _, m := range regexp.MustCompile("`(\\./)?([a-z][a-z0-9_]*/[a-z0-9_./-]*)`").FindAllStringSubmatch(doc, -1) {
		named = append(named, m[2])
	}
	// Markdown links to files of the tree.
	for _, m := range regexp.MustCompile(`\]\(([^)#:]+)(#[^)]*)?\)`).FindAllStringSubmatch(doc, -1) {
		named = append(named, m[1])
	}
	// The diagram's files: "(router.go)", "(processor/router.go)".
	for _, m := range regexp.MustCompile(`\(([a-z/]*[a-z_]+\.go)\)`).FindAllStringSubmatch(doc, -1) {
		p := m[1]
		if !strings.Contains(p, "/") {
			p = "processor/" + p
		}
		named = append(named, p)
	}
	for _, p := range named {
		if _, err := os.Stat(filepath.Join("..", filepath.FromSlash(strings.TrimSuffix(p, "/")))); err != nil {
			t.Errorf("ARCHITECTURE.md names %s, which does not exist", p)
		}
	}
	t.Logf("%d names checked, %d of them rule rows", len(named), len(rows))
}
