package main

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

// The variables `make build` and the Dockerfile set (LDFLAGS, build args
// VERSION and COMMIT): deploy/deploy_test.go checks that both name them.
const (
	versionVar = "github.com/dedupio/dedup/internal/app.Version"
	commitVar  = "github.com/dedupio/dedup/internal/app.Commit"
)

// A binary linked as the Makefile and the Dockerfile link it says which
// build it is: a typo in the -X path would silently leave "devel".
func TestVersionInjectedByLdflags(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "dedup")
	build := exec.Command("go", "build", "-o", bin,
		"-ldflags", "-X "+versionVar+"=v1.2.3-test -X "+commitVar+"=0123456789abcdef0123456789abcdef01234567", ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, arg := range []string{"version", "--version"} {
		out, err := exec.Command(bin, arg).CombinedOutput()
		if err != nil {
			t.Fatalf("dedup %s: %v\n%s", arg, err, out)
		}
		want := "dedup v1.2.3-test (commit 0123456789abcdef0123456789abcdef01234567, " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + ")\n"
		if string(out) != want {
			t.Errorf("dedup %s printed %q, want %q", arg, out, want)
		}
	}
}

// Without -ldflags (go run, go test) it falls back to what the toolchain
// recorded, and never prints "(devel)" or an empty field.
func TestVersionFallback(t *testing.T) {
	code, out, stderr := dedup("version")
	if code != 0 {
		t.Fatalf("dedup version: %d %s", code, stderr)
	}
	line := regexp.MustCompile(`^dedup (\S+) \(commit (\S+), go\S+ \S+/\S+\)\n$`).FindStringSubmatch(out)
	if line == nil || strings.Contains(line[1], "(devel)") {
		t.Errorf("dedup version printed %q, want dedup VERSION (commit COMMIT, goX linux/amd64)", out)
	}
}
