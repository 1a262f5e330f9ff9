package schedule

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// docs/schedules.md names the Temporal Go SDK version go.mod pins (the
// versions its "Why not Temporal Schedules" paragraph speaks of).
func TestDocsNameThePinnedSDK(t *testing.T) {
	mod, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*go\.temporal\.io/sdk (v\S+)`).FindSubmatch(mod)
	if m == nil {
		t.Fatal("go.mod pins no go.temporal.io/sdk")
	}
	doc, err := os.ReadFile("../../docs/schedules.md")
	if err != nil {
		t.Fatal(err)
	}
	if want := "go.temporal.io/sdk " + string(m[1]); !strings.Contains(string(doc), want) {
		t.Errorf("docs/schedules.md does not say %q (the version go.mod pins)", want)
	}
}
