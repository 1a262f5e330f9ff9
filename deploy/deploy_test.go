// Package deploy holds dedup's deployment files; its tests check what can
// be checked without a Docker engine or a cluster: every file parses, every
// service has what it needs, images are pinned, and every dedup config in
// them validates with dedup's own loader.
package deploy

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/dedupio/dedup/internal/app"
)

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

var pinned = regexp.MustCompile(`^[a-z0-9./_-]+(:[A-Za-z0-9._-]+)$`)

func checkImage(t *testing.T, where, image string) {
	t.Helper()
	if !pinned.MatchString(image) || strings.HasSuffix(image, ":latest") {
		t.Errorf("%s: image %q is not pinned by tag", where, image)
	}
}

func validate(t *testing.T, where string, doc []byte, env map[string]string) {
	t.Helper()
	for k, v := range env {
		t.Setenv(k, v)
	}
	cfg, err := app.ParseConfig(doc)
	if err != nil {
		t.Errorf("%s: dedup rejects its config: %v", where, err)
		return
	}
	if cfg.Admin.Listen == "" || strings.HasPrefix(cfg.Admin.Listen, "127.") {
		t.Errorf("%s: admin.listen %q is not reachable by Prometheus or probes", where, cfg.Admin.Listen)
	}
}

func TestCompose(t *testing.T) {
	var compose struct {
		Services map[string]struct {
			Image       string            `yaml:"image"`
			Build       any               `yaml:"build"`
			Command     []string          `yaml:"command"`
			Environment map[string]string `yaml:"environment"`
			Volumes     []string          `yaml:"volumes"`
			DependsOn   map[string]any    `yaml:"depends_on"`
		} `yaml:"services"`
	}
	readYAML(t, "../docker-compose.yml", &compose)
	for _, need := range []string{"kafka", "kafka-init", "postgres", "temporal", "temporal-ui", "prometheus", "grafana", "dedup-1", "dedup-2", "worker", "producer"} {
		if _, ok := compose.Services[need]; !ok {
			t.Errorf("compose has no %s service", need)
		}
	}
	built := false
	for name, s := range compose.Services {
		if s.Build != nil {
			built = true
		} else if s.Image == "" {
			t.Errorf("%s: neither image nor build", name)
		}
		if s.Build == nil && s.Image != "dedup:dev" {
			checkImage(t, name, s.Image)
		}
		if s.Image == "dedup:dev" && s.Build == nil && s.DependsOn == nil {
			t.Errorf("%s uses the locally built image but depends on no service that builds it", name)
		}
		for dep := range s.DependsOn {
			if _, ok := compose.Services[dep]; !ok {
				t.Errorf("%s depends on unknown service %s", name, dep)
			}
		}
		for _, v := range s.Volumes {
			src := strings.Split(v, ":")[0]
			if strings.HasPrefix(src, "./") {
				if _, err := os.Stat(filepath.Join("..", src)); err != nil {
					t.Errorf("%s mounts %s: %v", name, src, err)
				}
			}
		}
		if strings.HasPrefix(name, "dedup-") {
			if len(s.Command) < 3 || s.Command[0] != "run" {
				t.Errorf("%s: command %v, want run --config FILE", name, s.Command)
				continue
			}
			cfgPath := s.Command[2]
			var host string
			for _, v := range s.Volumes {
				parts := strings.Split(v, ":")
				if len(parts) >= 2 && parts[1] == cfgPath {
					host = parts[0]
				}
			}
			if host == "" {
				t.Errorf("%s: %s is not mounted", name, cfgPath)
				continue
			}
			doc, err := os.ReadFile(filepath.Join("..", host))
			if err != nil {
				t.Fatal(err)
			}
			validate(t, name, doc, s.Environment)
		}
	}
	if !built {
		t.Error("no service builds the dedup image")
	}
}

func TestDockerfile(t *testing.T) {
	b, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	var froms []string
	user := ""
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "FROM" {
			froms = append(froms, f[1])
			checkImage(t, "Dockerfile", f[1])
			user = ""
		}
		if len(f) >= 2 && f[0] == "USER" {
			user = f[1]
		}
	}
	if len(froms) < 2 {
		t.Errorf("Dockerfile has %d stages, want a multi-stage build", len(froms))
	}
	if !strings.Contains(froms[len(froms)-1], "static") || user == "" || strings.HasPrefix(user, "root") || strings.HasPrefix(user, "0") {
		t.Errorf("final stage %s runs as %q: want a static base and a non-root user", froms[len(froms)-1], user)
	}
}

func TestKustomizeBase(t *testing.T) {
	var k struct {
		Resources []string `yaml:"resources"`
	}
	readYAML(t, "k8s/base/kustomization.yaml", &k)
	kinds := map[string]map[string]any{}
	for _, r := range k.Resources {
		b, err := os.ReadFile(filepath.Join("k8s/base", r))
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		for {
			var doc map[string]any
			if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", r, err)
			}
			kind, _ := doc["kind"].(string)
			if kind == "" || doc["apiVersion"] == nil {
				t.Errorf("%s: a document without kind or apiVersion", r)
			}
			kinds[kind] = doc
		}
	}
	for _, need := range []string{"Deployment", "ConfigMap", "Service", "PodDisruptionBudget", "ScaledObject", "ServiceMonitor"} {
		if kinds[need] == nil {
			t.Errorf("kustomize base has no %s", need)
		}
	}
	var dep struct {
		Spec struct {
			Template struct {
				Spec struct {
					Containers []struct {
						Env            []map[string]any `yaml:"env"`
						ReadinessProbe struct {
							HTTPGet struct{ Path string } `yaml:"httpGet"`
						} `yaml:"readinessProbe"`
						LivenessProbe struct {
							HTTPGet struct{ Path string } `yaml:"httpGet"`
						} `yaml:"livenessProbe"`
					} `yaml:"containers"`
				} `yaml:"spec"`
			} `yaml:"template"`
		} `yaml:"spec"`
	}
	b, _ := yaml.Marshal(kinds["Deployment"])
	if err := yaml.Unmarshal(b, &dep); err != nil || len(dep.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("deployment: %v", err)
	}
	c := dep.Spec.Template.Spec.Containers[0]
	if c.ReadinessProbe.HTTPGet.Path != "/readyz" || c.LivenessProbe.HTTPGet.Path != "/healthz" {
		t.Errorf("probes: readiness %q liveness %q", c.ReadinessProbe.HTTPGet.Path, c.LivenessProbe.HTTPGet.Path)
	}
	secretRef := false
	for _, e := range c.Env {
		if e["name"] == "DATABASE_URL" && e["valueFrom"] != nil {
			secretRef = true
		}
	}
	if !secretRef {
		t.Error("DATABASE_URL does not come from a Secret")
	}
	data, _ := kinds["ConfigMap"]["data"].(map[string]any)
	doc, _ := data["dedup.yaml"].(string)
	validate(t, "ConfigMap dedup", []byte(doc), map[string]string{"DATABASE_URL": "postgres://dedup@postgres/dedup"})
	spec, _ := kinds["ScaledObject"]["spec"].(map[string]any)
	if spec["maxReplicaCount"] != 8 {
		t.Errorf("ScaledObject maxReplicaCount %v, want the partition count, 8", spec["maxReplicaCount"])
	}
}

func TestPrometheusConfig(t *testing.T) {
	var p struct {
		RuleFiles     []string         `yaml:"rule_files"`
		ScrapeConfigs []map[string]any `yaml:"scrape_configs"`
	}
	readYAML(t, "prometheus/prometheus.yml", &p)
	if len(p.RuleFiles) == 0 || len(p.ScrapeConfigs) == 0 {
		t.Fatalf("prometheus.yml: %+v", p)
	}
	var ds struct {
		Datasources []struct{ Type, URL string } `yaml:"datasources"`
	}
	readYAML(t, "grafana/provisioning/datasources/prometheus.yaml", &ds)
	if len(ds.Datasources) != 1 || ds.Datasources[0].Type != "prometheus" {
		t.Errorf("grafana datasources: %+v", ds)
	}
}
