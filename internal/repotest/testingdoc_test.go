package repotest

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// docs/testing.md says what each test proves, by the test's name: every
// name it gives (`TestX`) is a test function of the tree (either module),
// so that a reader who runs `go test -run TestX` runs the test the
// sentence is about, not nothing (go test passes a -run that matches no
// test). Adversary 38b's check: a branch's docs named a test by a wrong
// name.
func TestTestingDocNamesTestsThatExist(t *testing.T) {
	b, err := os.ReadFile("../../docs/testing.md")
	if err != nil {
		t.Fatal(err)
	}
	named := map[string]bool{}
	for _, m := range regexp.MustCompile("`(Test[A-Za-z0-9_]+)`").FindAllStringSubmatch(string(b), -1) {
		named[m[1]] = true
	}
	if len(named) < 20 {
		t.Fatalf("docs/testing.md: %d test names found, want its many (the check checks nothing)", len(named))
	}
	defined := map[string]bool{}
	fn := regexp.MustCompile(`(?m)^func (Test[A-Za-z0-9_]+)\(`)
	err = filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range fn.FindAllStringSubmatch(string(src), -1) {
			defined[m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for name := range named {
		if !defined[name] {
			t.Errorf("docs/testing.md names %s, which is no test of the tree", name)
		}
	}
	t.Logf("%d test names checked against %d tests", len(named), len(defined))
}
