package deploy

import (
	"fmt"
	"strings"
	"testing"

	"github.com/dedupio/dedup/sink/starter"
)

// The compose stack's routers run with temporal.search_attributes: on, so
// its one-shot temporal-init service must create every attribute they
// send, with its type: one it missed would stop the routers at start-up.
func TestComposeCreatesEverySearchAttributeTheRoutersSend(t *testing.T) {
	var compose struct {
		Services map[string]struct {
			Command   []string       `yaml:"command"`
			DependsOn map[string]any `yaml:"depends_on"`
		} `yaml:"services"`
	}
	readYAML(t, "../docker-compose.yml", &compose)
	initSvc, ok := compose.Services["temporal-init"]
	if !ok {
		t.Fatal("compose has no temporal-init service")
	}
	cmd := strings.Join(strings.Fields(strings.Join(initSvc.Command, " ")), " ")
	for _, a := range starter.SearchAttributes() {
		typ := strings.TrimPrefix(a.Type.String(), "INDEXED_VALUE_TYPE_")
		typ = typ[:1] + strings.ToLower(typ[1:]) // KEYWORD -> Keyword, the CLI's spelling
		if want := fmt.Sprintf("--name %s --type %s", a.Name, typ); !strings.Contains(cmd, want) {
			t.Errorf("temporal-init does not create %s: its command lacks %q", a.Name, want)
		}
	}
	for _, router := range []string{"dedup-1", "dedup-2"} {
		if _, ok := compose.Services[router].DependsOn["temporal-init"]; !ok {
			t.Errorf("%s does not wait for temporal-init: it would start before its search attributes exist", router)
		}
	}
}
