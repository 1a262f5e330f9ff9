// Package deploy holds dedup's deployment files; its tests check what can
// be checked without a Docker engine or a cluster: every file parses, every
// service has what it needs, images are pinned, every dedup config in them
// validates with dedup's own loader, published ports stay on 127.0.0.1,
// GOMEMLIMIT sits under the memory limit, pods are locked down, the
// version is injected, every alert is annotated, linked to its runbook
// section and tested, and the dashboard's queries follow its variables.
// `make rules` (promtool) and `make k8s` (kustomize build) check the rest.
package deploy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"go.yaml.in/yaml/v3"

	"github.com/dedupio/dedup/internal/config"
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

// validate parses a dedup config with dedup's own loader, and checks that
// every address a process serves (the routers', the worker's and the
// ingress's admin ports, the ingress's API) listens beyond the loopback
// interface, for Prometheus, probes and the ingress's clients.
func validate(t *testing.T, where string, doc []byte, env map[string]string) config.Config {
	t.Helper()
	for k, v := range env {
		t.Setenv(k, v)
	}
	cfg, err := config.Parse(doc)
	if err != nil {
		t.Errorf("%s: dedup rejects its config: %v", where, err)
		return cfg
	}
	for key, addr := range map[string]string{"admin.listen": cfg.Admin.Listen, "worker.admin_listen": cfg.Worker.AdminListen,
		"ingress.listen": cfg.Ingress.Listen, "ingress.admin_listen": cfg.Ingress.AdminListen} {
		if addr == "" || strings.HasPrefix(addr, "127.") || strings.HasPrefix(addr, "localhost:") {
			t.Errorf("%s: %s %q is not reachable from outside its container", where, key, addr)
		}
	}
	return cfg
}

// listenPort is the port of a listen address (0.0.0.0:9466: 9466).
func listenPort(addr string) int {
	_, p, _ := strings.Cut(addr, ":")
	n, _ := strconv.Atoi(p)
	return n
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
			Ports       []string          `yaml:"ports"`
			MemLimit    string            `yaml:"mem_limit"`
		} `yaml:"services"`
	}
	readYAML(t, "../docker-compose.yml", &compose)
	// The same services' environment as written: a key with no value
	// (the shell's variable) and env_file, which compose reads too.
	var raw struct {
		Services map[string]struct {
			Environment map[string]*string `yaml:"environment"`
			EnvFile     any                `yaml:"env_file"`
		} `yaml:"services"`
	}
	readYAML(t, "../docker-compose.yml", &raw)
	checkNoComposeFilesBesides(t)
	for _, need := range []string{"kafka", "kafka-init", "postgres", "migrate", "temporal", "temporal-ui", "prometheus", "grafana", "dedup-1", "dedup-2", "worker", "ingress", "producer"} {
		if _, ok := compose.Services[need]; !ok {
			t.Errorf("compose has no %s service", need)
		}
	}
	built := false
	published := map[string]string{}
	dbUsers := map[string]string{} // PostgreSQL user: the process that logs in as it
	for name, s := range compose.Services {
		if s.Build != nil {
			built = true
			// The image says which build it is (make compose sets them).
			b, _ := s.Build.(map[string]any)
			args, _ := b["args"].(map[string]any)
			if args["VERSION"] == nil || args["COMMIT"] == nil {
				t.Errorf("%s builds the image without the VERSION and COMMIT build args: %v", name, s.Build)
			}
		} else if s.Image == "" {
			t.Errorf("%s: neither image nor build", name)
		}
		if s.Build == nil && s.Image != "dedup:dev" {
			checkImage(t, name, s.Image)
		}
		if s.Image == "dedup:dev" && s.Build == nil && s.DependsOn == nil {
			t.Errorf("%s uses the locally built image but depends on no service that builds it", name)
		}
		// A laptop demo: nothing is published beyond the loopback interface.
		for _, p := range s.Ports {
			if !strings.HasPrefix(p, "127.0.0.1:") {
				t.Errorf("%s publishes %q on every interface: want 127.0.0.1:HOST:CONTAINER", name, p)
			}
			// Two services on one host port: the second would not start.
			host := strings.Join(strings.Split(p, ":")[:2], ":")
			if other, ok := published[host]; ok {
				t.Errorf("%s and %s both publish %s", name, other, host)
			}
			published[host] = name
		}
		process := len(s.Command) > 0 && slices.Contains([]string{"run", "worker", "ingress", "migrate"}, s.Command[0])
		if process {
			checkMemLimit(t, name, s.Environment["GOMEMLIMIT"], s.MemLimit, dockerBytes)
			checkGOGC(t, name, s.Environment["GOGC"], s.Environment["GOMEMLIMIT"])
			checkComposeHeapEnv(t, name, raw.Services[name].Environment, raw.Services[name].EnvFile)
			// Least privilege: each kind of process logs in as its own
			// user (TestComposePostgresInit checks each user's role), and
			// only the migrate service changes the schema: the others
			// start once it exited 0.
			user := composeDBUser(t, name, s.Environment["DATABASE_URL"])
			if other, ok := dbUsers[user]; ok && other != s.Command[0] {
				t.Errorf("%s (%s) logs in to PostgreSQL as %q, the user of `dedup %s` too: want a user per process", name, s.Command[0], user, other)
			}
			dbUsers[user] = s.Command[0]
			if s.Command[0] != "migrate" && get(s.DependsOn["migrate"], "condition") != "service_completed_successfully" {
				t.Errorf("%s does not wait for the migrate service (depends_on migrate: service_completed_successfully): its role may not migrate", name)
			}
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
		if strings.HasPrefix(name, "dedup-") && (len(s.Command) == 0 || s.Command[0] != "run") {
			t.Errorf("%s: command %v, want run --config FILE", name, s.Command)
		}
		if name == "ingress" && (len(s.Command) == 0 || s.Command[0] != "ingress") {
			t.Errorf("%s: command %v, want ingress --config FILE", name, s.Command)
		}
		// Every dedup process (router, worker, ingress) reads a mounted
		// config that dedup accepts.
		if process {
			if len(s.Command) < 3 || s.Command[1] != "--config" {
				t.Errorf("%s: command %v, want %s --config FILE", name, s.Command, s.Command[0])
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
			cfg := validate(t, name, doc, s.Environment)
			if s.Command[0] == "ingress" {
				if err := cfg.Ingress.CheckExposure(); err != nil {
					t.Errorf("%s: dedup ingress would refuse to start: %v", name, err)
				}
				// The published port is the one the API listens on.
				want := fmt.Sprintf(":%d", listenPort(cfg.Ingress.Listen))
				if len(s.Ports) != 1 || !strings.HasSuffix(s.Ports[0], want) {
					t.Errorf("%s publishes %v, want 127.0.0.1:HOST%s (ingress.listen %s)", name, s.Ports, want, cfg.Ingress.Listen)
				}
			}
		}
	}
	if !built {
		t.Error("no service builds the dedup image")
	}
	// Grafana asks for a login, with a password that is not in the file.
	g := compose.Services["grafana"].Environment
	if g["GF_AUTH_ANONYMOUS_ENABLED"] != "false" {
		t.Errorf("grafana: GF_AUTH_ANONYMOUS_ENABLED %q, want \"false\"", g["GF_AUTH_ANONYMOUS_ENABLED"])
	}
	if pw := g["GF_SECURITY_ADMIN_PASSWORD"]; !regexp.MustCompile(`^\$\{GRAFANA_ADMIN_PASSWORD:\?.+\}$`).MatchString(pw) {
		t.Errorf("grafana: GF_SECURITY_ADMIN_PASSWORD %q, want ${GRAFANA_ADMIN_PASSWORD:?…}: required, no default", pw)
	}
}

// composeDBUser is the PostgreSQL user of a compose service's
// DATABASE_URL.
func composeDBUser(t *testing.T, service, dbURL string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil || u.User == nil || u.User.Username() == "" {
		t.Errorf("%s: DATABASE_URL %q names no PostgreSQL user (%v)", service, dbURL, err)
		return ""
	}
	return u.User.Username()
}

// checkMemLimit: GOMEMLIMIT is about 90% of the container's memory limit,
// so that the GC works harder before the kernel kills the process.
func checkMemLimit(t *testing.T, where, gomemlimit, limit string, parseLimit func(string) (float64, bool)) {
	t.Helper()
	soft, ok1 := goBytes(gomemlimit)
	hard, ok2 := parseLimit(limit)
	if gomemlimit != "" && !ok1 {
		t.Errorf("%s: GOMEMLIMIT %q is not what Go's runtime reads (a whole number, alone or with B, KiB, MiB, GiB or TiB): the process stops at start", where, gomemlimit)
		return
	}
	if !ok1 || !ok2 {
		t.Errorf("%s: GOMEMLIMIT %q, memory limit %q: want both set", where, gomemlimit, limit)
		return
	}
	if r := soft / hard; r < 0.85 || r > 0.95 {
		t.Errorf("%s: GOMEMLIMIT %s is %.0f%% of the memory limit %s, want about 90%%", where, gomemlimit, 100*r, limit)
	}
}

// checkGOGC: a GOGC that lets the heap grow past Go's default (100) is
// set only beside GOMEMLIMIT, which still bounds it under the container's
// limit, and is a number from 100 to 400: not "off" (a heap bounded by the
// soft limit alone collects in a loop near it) nor a value that lets a
// burst's garbage reach the limit before the first collection.
func checkGOGC(t *testing.T, where, gogc, gomemlimit string) {
	t.Helper()
	if gogc == "" {
		return
	}
	n, err := strconv.Atoi(gogc)
	if err != nil || n < 100 || n > 400 {
		t.Errorf("%s: GOGC %q, want a number from 100 to 400 (or unset)", where, gogc)
	}
	if gomemlimit == "" {
		t.Errorf("%s: GOGC %s without GOMEMLIMIT: the heap it lets grow has no bound under the container's limit", where, gogc)
	}
}

// goBytes parses GOMEMLIMIT as the runtime does (runtime.parseByteCount):
// a decimal integer, alone or with B, KiB, MiB, GiB or TiB; anything else
// (230.5MiB, 2.4e8B, NaNMiB) stops every process it is set on at start
// ("malformed GOMEMLIMIT"; adversary 55a).
func goBytes(s string) (float64, bool) {
	n, unit := s, int64(1)
	for _, u := range []struct {
		suffix string
		bytes  int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}} {
		if m, ok := strings.CutSuffix(s, u.suffix); ok {
			n, unit = m, u.bytes
			break
		}
	}
	if n == "" || n[len(n)-1] < '0' || n[len(n)-1] > '9' {
		return 0, false
	}
	v, err := strconv.ParseInt(n, 10, 64)
	if err != nil || v < 0 {
		return 0, false
	}
	return float64(v) * float64(unit), true
}

// k8sBytes parses a Kubernetes memory quantity (256Mi, 1G, 134217728).
func k8sBytes(s string) (float64, bool) {
	return scaled(s, []string{"Ti", "Gi", "Mi", "Ki", "T", "G", "M", "k", ""}, []float64{1 << 40, 1 << 30, 1 << 20, 1 << 10, 1e12, 1e9, 1e6, 1e3, 1})
}

// dockerBytes parses compose's mem_limit (256m: binary units).
func dockerBytes(s string) (float64, bool) {
	return scaled(strings.ToLower(s), []string{"gb", "mb", "kb", "g", "m", "k", "b", ""}, []float64{1 << 30, 1 << 20, 1 << 10, 1 << 30, 1 << 20, 1 << 10, 1, 1})
}

func scaled(s string, suffixes []string, factors []float64) (float64, bool) {
	for i, suf := range suffixes {
		if n, ok := strings.CutSuffix(s, suf); ok && n != "" {
			v, err := strconv.ParseFloat(n, 64)
			return v * factors[i], err == nil
		}
	}
	return 0, false
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
	checkImageEnvLeavesHeapToManifests(t, string(b))
	// The build args VERSION and COMMIT reach the binary.
	for _, want := range []string{"ARG VERSION", "ARG COMMIT", versionVar + "=${VERSION}", commitVar + "=${COMMIT}"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("Dockerfile does not say %q: the image would report devel", want)
		}
	}
}

// The variables -ldflags sets; cmd/dedup's TestVersionInjectedByLdflags
// checks that a binary linked so reports them.
const (
	versionVar = "-X github.com/dedupio/dedup/internal/app.Version"
	commitVar  = "-X github.com/dedupio/dedup/internal/app.Commit"
)

// make build injects the version; make test runs the promtool and
// kustomize checks.
func TestMakefile(t *testing.T) {
	b, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	mk := string(b)
	for _, want := range []string{versionVar + "=$(VERSION)", commitVar + "=$(COMMIT)", `$(GO) build -ldflags "$(LDFLAGS)" -o bin/dedup ./cmd/dedup`} {
		if !strings.Contains(mk, want) {
			t.Errorf("Makefile does not say %q", want)
		}
	}
	test := regexp.MustCompile(`(?m)^test:(.*)$`).FindStringSubmatch(mk)
	if test == nil || !slices.Contains(strings.Fields(test[1]), "rules") || !slices.Contains(strings.Fields(test[1]), "k8s") {
		t.Errorf("make test does not run the rules and k8s checks: %q", test)
	}
	for _, want := range []string{"promtool check config deploy/prometheus/prometheus.yml", "promtool check rules deploy/prometheus/rules.yml", "promtool test rules deploy/prometheus/rules_test.yml"} {
		if !strings.Contains(mk, want) {
			t.Errorf("Makefile does not run %q", want)
		}
	}
}

// CI shows only the end of .ci/run's output, so .ci/run prints again at
// the end what failed: a failed step of make test is named there. Here the
// protocol model's check fails, on a copy of the Makefile and .ci/run whose
// tools are stubs that pass (seconds, nothing built).
func TestCIRunNamesAFailedModelCheckInItsSummary(t *testing.T) {
	for _, tool := range []string{"make", "bash"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed", tool)
		}
	}
	mk, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	run, err := os.ReadFile("../.ci/run")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(path, s string) {
		t.Helper()
		p := filepath.Join(dir, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	const pass = "#!/bin/sh\nexit 0\n"
	write("Makefile", string(mk))
	write(".ci/run", string(run))
	write(".ci/deps", pass)
	// The model's check as it reports a violated property.
	write("processor/model/check.sh", "echo '[fixed] FAILED:'\necho 'pan:1: assertion violated (S1)'\nexit 1\n")
	// The pinned tools, where make builds them.
	version := func(name string) string {
		m := regexp.MustCompile(`(?m)^` + name + ` = (\S+)$`).FindSubmatch(mk)
		if m == nil {
			t.Fatalf("Makefile sets no %s", name)
		}
		return string(m[1])
	}
	write("bin/tools/kustomize-"+version("KUSTOMIZE_VERSION")+"/kustomize", pass)
	write("bin/tools/golangci-lint-"+version("GOLANGCI_LINT_VERSION")+"/golangci-lint", pass)
	for _, tool := range []string{"go", "gofmt", "promtool"} {
		write("stub/"+tool, pass)
	}
	write("deploy/k8s/base/kustomization.yaml", "resources: []\n")
	for _, d := range []string{"client/testdata/stranger", "integration"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("bash", ".ci/run")
	cmd.Dir = dir
	for _, kv := range os.Environ() {
		switch name, _, _ := strings.Cut(kv, "="); name {
		case "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "GNUMAKEFLAGS", "MAKEFILES", "GO", "TMPDIR", "PATH":
		default:
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "PATH="+filepath.Join(dir, "stub")+string(os.PathListSeparator)+os.Getenv("PATH"), "TMPDIR="+dir)
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf(".ci/run passed with the model's check failing:\n%s", out)
	}
	_, summary, ok := strings.Cut(string(out), "=== .ci/run failed")
	if !ok {
		t.Fatalf(".ci/run printed no summary:\n%s", out)
	}
	_, summary, _ = strings.Cut(summary, "\n") // past its header, which names the log
	if !strings.Contains(summary, "model") {
		t.Errorf("the summary at the end of .ci/run's output does not name the failed model check:\n%s\nthe whole output:\n%s", summary, out)
	}
}

// kustomization is what the tests read of a kustomization or component.
type kustomization struct {
	Resources  []string `yaml:"resources"`
	Components []string `yaml:"components"`
	Labels     []struct {
		Pairs map[string]string `yaml:"pairs"`
	} `yaml:"labels"`
	Images []map[string]string `yaml:"images"`
}

// k8sDocs reads the resources the kustomization in dir lists, with the
// labels its labels transformer adds to their metadata.
func k8sDocs(t *testing.T, dir string) (kustomization, []map[string]any) {
	t.Helper()
	var k kustomization
	readYAML(t, filepath.Join(dir, "kustomization.yaml"), &k)
	var docs []map[string]any
	for _, r := range k.Resources {
		b, err := os.ReadFile(filepath.Join(dir, r))
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		for {
			var doc map[string]any
			if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s/%s: %v", dir, r, err)
			}
			if doc["kind"] == nil || doc["apiVersion"] == nil {
				t.Errorf("%s/%s: a document without kind or apiVersion", dir, r)
			}
			md, _ := doc["metadata"].(map[string]any)
			labels, _ := md["labels"].(map[string]any)
			if labels == nil {
				labels = map[string]any{}
			}
			for _, l := range k.Labels {
				for k, v := range l.Pairs {
					labels[k] = v
				}
			}
			if md != nil {
				md["labels"] = labels
			}
			docs = append(docs, doc)
		}
	}
	return k, docs
}

// get walks a parsed YAML document: keys of maps, indexes of lists.
func get(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			l, _ := v.([]any)
			if k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

// list is v as a list (nil when it is none).
func list(v any) []any {
	l, _ := v.([]any)
	return l
}

func kind(docs []map[string]any, k string) []map[string]any {
	var out []map[string]any
	for _, d := range docs {
		if d["kind"] == k {
			out = append(out, d)
		}
	}
	return out
}

// subset: every label of sel is in labels (a selector matching them).
func subset(sel, labels any) bool {
	s, _ := sel.(map[string]any)
	l, _ := labels.(map[string]any)
	if len(s) == 0 {
		return false
	}
	for k, v := range s {
		if l[k] != v {
			return false
		}
	}
	return true
}

// The kustomize base (the routers) and the worker, ingress and migrate
// components: every resource parses, pods are locked down and sized,
// probed and scraped on the port their config serves, a NetworkPolicy
// covers each Deployment and the migration Job, each process reads its own
// PostgreSQL Secret, mounted as a file (postgres.url_file) and never in its
// environment, every ServiceMonitor scrapes one Service, every component is
// in an overlay and every overlay runs the migration Job; what kustomize
// renders bounds every container's heap (checkRenderedHeaps).
// `make k8s` builds the base and every overlay with kustomize.
func TestKustomize(t *testing.T) {
	t.Run("rendered heaps", checkRenderedHeaps)
	base, docs := k8sDocs(t, "k8s/base")
	for _, need := range []string{"Deployment", "ConfigMap", "Service", "PodDisruptionBudget", "ScaledObject", "ServiceMonitor", "NetworkPolicy"} {
		if len(kind(docs, need)) == 0 {
			t.Errorf("kustomize base has no %s", need)
		}
	}
	all := append([]map[string]any{}, docs...)
	for _, c := range []string{"worker", "ingress"} {
		comp, cdocs := k8sDocs(t, "k8s/components/"+c)
		for _, need := range []string{"Deployment", "Service", "PodDisruptionBudget", "ServiceMonitor", "NetworkPolicy"} {
			if len(kind(cdocs, need)) == 0 {
				t.Errorf("%s component has no %s", c, need)
			}
		}
		// One image, one tag, wherever it is named.
		if !reflect.DeepEqual(base.Images, comp.Images) || len(base.Images) != 1 {
			t.Errorf("images: base %v, %s component %v: want the same one", base.Images, c, comp.Images)
		}
		all = append(all, cdocs...)
	}
	// The migration Job: the one pod whose PostgreSQL user may change the
	// schema.
	mig, mdocs := k8sDocs(t, "k8s/components/migrate")
	if len(kind(mdocs, "Job")) != 1 || len(kind(mdocs, "NetworkPolicy")) != 1 {
		t.Errorf("migrate component: want one Job and its NetworkPolicy")
	}
	if !reflect.DeepEqual(base.Images, mig.Images) {
		t.Errorf("images: base %v, migrate component %v: want the same one", base.Images, mig.Images)
	}
	all = append(all, mdocs...)
	for _, job := range kind(all, "Job") {
		checkJob(t, job, all)
	}

	cm := kind(docs, "ConfigMap")[0]
	doc, _ := get(cm, "data", "dedup.yaml").(string)
	// The PostgreSQL URL is a file, postgres.url_file, that each pod mounts
	// from its own Secret (key url), never ${DATABASE_URL}: an environment
	// variable is in /proc/*/environ, crash dumps and every child process.
	// dedup's loader reads the file: here, a stand-in.
	var pg struct {
		Postgres struct {
			URL     string `yaml:"url"`
			URLFile string `yaml:"url_file"`
		} `yaml:"postgres"`
	}
	if err := yaml.Unmarshal([]byte(doc), &pg); err != nil {
		t.Fatalf("ConfigMap dedup: %v", err)
	}
	urlFile := pg.Postgres.URLFile
	if pg.Postgres.URL != "" || !filepath.IsAbs(urlFile) || filepath.Base(urlFile) != "url" {
		t.Errorf("ConfigMap dedup: postgres.url %q, url_file %q: want no url, and url_file DIR/url (the key url of each process's Secret, mounted at DIR)", pg.Postgres.URL, urlFile)
	}
	if urlFile != "" {
		standIn := filepath.Join(t.TempDir(), "url")
		if err := os.WriteFile(standIn, []byte("postgres://dedup@postgres/dedup?sslmode=verify-full\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		doc = strings.ReplaceAll(doc, urlFile, standIn)
	}
	cfg := validate(t, "ConfigMap dedup", []byte(doc), nil)
	if n := get(kind(docs, "ScaledObject")[0], "spec", "maxReplicaCount"); n != 8 {
		t.Errorf("ScaledObject maxReplicaCount %v, want the partition count, 8", n)
	}

	// Each Deployment by the process it runs (its first argument), with
	// the ports its config section serves.
	ports := map[string]map[string]int{
		"run":     {"admin": listenPort(cfg.Admin.Listen)},
		"worker":  {"admin": listenPort(cfg.Worker.AdminListen)},
		"ingress": {"admin": listenPort(cfg.Ingress.AdminListen), "http": listenPort(cfg.Ingress.Listen)},
	}
	seen := map[string]bool{}
	// Least privilege: each process's PostgreSQL URL is its own Secret (a
	// PostgreSQL user with that process's role; docs/security.md), mounted
	// where the shared ConfigMap's postgres.url_file points.
	dbSecrets := map[string]string{} // Secret: the process that reads it
	for _, w := range append(kind(all, "Deployment"), kind(all, "Job")...) {
		name, _ := get(w, "metadata", "name").(string)
		tmpl := get(w, "spec", "template").(map[string]any)
		process, _ := get(tmpl, "spec", "containers", 0, "args", 0).(string)
		if secret := checkPostgresSecret(t, name, tmpl, urlFile); secret != "" {
			if other, ok := dbSecrets[secret]; ok && other != process {
				t.Errorf("%s (%s) reads its PostgreSQL URL from the Secret %q, as `dedup %s` does: want a Secret (a PostgreSQL user) per process", name, process, secret, other)
			}
			dbSecrets[secret] = process
		}
		checkLockedDown(t, name, tmpl)
	}
	for _, dep := range kind(all, "Deployment") {
		name, _ := get(dep, "metadata", "name").(string)
		tmpl := get(dep, "spec", "template").(map[string]any)
		process, _ := get(tmpl, "spec", "containers", 0, "args", 0).(string)
		if ports[process] == nil {
			t.Errorf("%s runs %q, want run, worker or ingress", name, process)
			continue
		}
		seen[process] = true
		checkPod(t, name, tmpl, all, process)
		got := map[string]int{}
		for _, p := range list(get(tmpl, "spec", "containers", 0, "ports")) {
			n, _ := get(p, "containerPort").(int)
			got[fmt.Sprint(get(p, "name"))] = n
		}
		if !reflect.DeepEqual(got, ports[process]) {
			t.Errorf("%s: container ports %v, want %v (its config's listen addresses)", name, got, ports[process])
		}
		// The tenant keyring: the routers verify, the ingress signs, no
		// other process may read it (a holder speaks for every tenant).
		if process == "run" || process == "ingress" {
			checkSecretMount(t, name, tmpl, "kafka.tenant_keys_file", cfg.Kafka.TenantKeysFile)
		} else {
			for _, v := range list(get(tmpl, "spec", "volumes")) {
				if get(v, "secret", "secretName") == "dedup-tenant-keys" {
					t.Errorf("%s (%s) mounts the tenant keyring: only the routers and the ingress may read it", name, process)
				}
			}
		}
		if process == "ingress" {
			checkTokensMount(t, name, tmpl, cfg.Ingress.TokensFile)
			checkIngressMemory(t, name, tmpl, cfg)
		}
	}
	if len(seen) != len(ports) {
		t.Errorf("Deployments run %v, want each of run, worker and ingress", seen)
	}
	for _, sm := range kind(all, "ServiceMonitor") {
		n := 0
		for _, svc := range kind(all, "Service") {
			if subset(get(sm, "spec", "selector", "matchLabels"), get(svc, "metadata", "labels")) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("ServiceMonitor %v selects %d Services, want 1", get(sm, "metadata", "name"), n)
		}
	}
	for _, svc := range kind(all, "Service") {
		n := 0
		for _, dep := range kind(all, "Deployment") {
			if subset(get(svc, "spec", "selector"), get(dep, "spec", "template", "metadata", "labels")) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("Service %v selects the pods of %d Deployments, want 1", get(svc, "metadata", "name"), n)
		}
	}

	// Every overlay names what exists, and every component is in one;
	// `make k8s` builds them.
	overlays, _ := filepath.Glob("k8s/overlays/*/kustomization.yaml")
	if len(overlays) == 0 {
		t.Error("no overlay under k8s/overlays")
	}
	used := map[string]bool{}
	for _, o := range overlays {
		var k kustomization
		readYAML(t, o, &k)
		for _, r := range append(k.Resources, k.Components...) {
			if _, err := os.Stat(filepath.Join(filepath.Dir(o), r)); err != nil {
				t.Errorf("%s: %v", o, err)
			}
		}
		for _, c := range k.Components {
			used[filepath.Base(c)] = true
		}
		// Every overlay runs the routers (the base), whose role may not
		// migrate: the migration Job comes with them.
		if !slices.Contains(k.Components, "../../components/migrate") {
			t.Errorf("%s: no components/migrate: nothing would apply the ledger's migrations", o)
		}
	}
	components, _ := filepath.Glob("k8s/components/*/kustomization.yaml")
	for _, c := range components {
		if c := filepath.Base(filepath.Dir(c)); !used[c] {
			t.Errorf("component %s is in no overlay: make k8s would never build it", c)
		}
	}
}

// checkLockedDown: a pod template that runs as a non-root user under the
// runtime's seccomp profile, with a read-only root file system, no
// privilege escalation and no capabilities.
func checkLockedDown(t *testing.T, name string, tmpl map[string]any) {
	t.Helper()
	if get(tmpl, "spec", "securityContext", "runAsNonRoot") != true || get(tmpl, "spec", "securityContext", "seccompProfile", "type") != "RuntimeDefault" {
		t.Errorf("%s: the pod's securityContext %v: want runAsNonRoot and seccompProfile RuntimeDefault", name, get(tmpl, "spec", "securityContext"))
	}
	for _, c := range list(get(tmpl, "spec", "containers")) {
		sc := get(c, "securityContext")
		if get(sc, "allowPrivilegeEscalation") != false || get(sc, "readOnlyRootFilesystem") != true || fmt.Sprint(get(sc, "capabilities", "drop")) != "[ALL]" {
			t.Errorf("%s: container %v securityContext %v: want allowPrivilegeEscalation false, readOnlyRootFilesystem, capabilities drop [ALL]", name, get(c, "name"), sc)
		}
	}
}

// checkJob: the migration Job runs `dedup migrate`, mounts no
// service-account token, keeps GOMEMLIMIT under its memory limit (its
// PostgreSQL Secret: checkPostgresSecret), removes itself once finished
// (a Job's pod template cannot change: the next version's apply would be
// refused), and its NetworkPolicy admits nothing and lets out DNS and
// PostgreSQL only.
func checkJob(t *testing.T, job map[string]any, all []map[string]any) {
	t.Helper()
	name, _ := get(job, "metadata", "name").(string)
	tmpl, _ := get(job, "spec", "template").(map[string]any)
	c := get(tmpl, "spec", "containers", 0)
	if args := fmt.Sprint(get(c, "args")); args != "[migrate --config /etc/dedup/dedup.yaml]" {
		t.Errorf("%s runs %s, want migrate --config /etc/dedup/dedup.yaml", name, args)
	}
	if get(tmpl, "spec", "automountServiceAccountToken") != false {
		t.Errorf("%s: automountServiceAccountToken is not false", name)
	}
	if rp := get(tmpl, "spec", "restartPolicy"); rp != "OnFailure" && rp != "Never" {
		t.Errorf("%s: restartPolicy %v", name, rp)
	}
	if _, ok := get(job, "spec", "ttlSecondsAfterFinished").(int); !ok {
		t.Errorf("%s: no ttlSecondsAfterFinished: the finished Job would stay, and the next version's apply fail on its pod template", name)
	}
	env := map[string]any{}
	for _, e := range list(get(c, "env")) {
		env[fmt.Sprint(get(e, "name"))] = e
	}
	gml, _ := get(env["GOMEMLIMIT"], "value").(string)
	lim, _ := get(c, "resources", "limits", "memory").(string)
	checkMemLimit(t, name, gml, lim, k8sBytes)
	gogc, _ := get(env["GOGC"], "value").(string)
	checkGOGC(t, name, gogc, gml)
	var np map[string]any
	for _, p := range kind(all, "NetworkPolicy") {
		if subset(get(p, "spec", "podSelector", "matchLabels"), get(tmpl, "metadata", "labels")) {
			np = p
		}
	}
	if np == nil {
		t.Errorf("%s: no NetworkPolicy selects its pods", name)
		return
	}
	if types := fmt.Sprint(get(np, "spec", "policyTypes")); types != "[Ingress Egress]" || len(list(get(np, "spec", "ingress"))) != 0 {
		t.Errorf("%s: NetworkPolicy policyTypes %s, ingress %v: want both types and no ingress rule", name, types, get(np, "spec", "ingress"))
	}
	var egress []string
	for _, rule := range list(get(np, "spec", "egress")) {
		for _, p := range list(get(rule, "ports")) {
			egress = append(egress, fmt.Sprintf("%v/%v", get(p, "port"), get(p, "protocol")))
		}
	}
	slices.Sort(egress)
	if want := []string{"53/TCP", "53/UDP", "5432/TCP"}; !slices.Equal(egress, want) {
		t.Errorf("%s: NetworkPolicy lets out %v, want %v", name, egress, want)
	}
}

// checkTokensMount: the ingress's bearer tokens are a Secret, mounted as a
// directory at ingress.tokens_file's (a subPath mount is never updated,
// and a token revoked in the Secret would stay valid).
func checkTokensMount(t *testing.T, name string, tmpl map[string]any, tokensFile string) {
	t.Helper()
	if tokensFile == "" {
		t.Errorf("%s: the ConfigMap's ingress.tokens_file is empty: the API would take any request", name)
		return
	}
	checkSecretMount(t, name, tmpl, "ingress.tokens_file", tokensFile)
}

// checkPostgresSecret: the pod reads its PostgreSQL URL from the file
// postgres.url_file names, a Secret mounted at its directory
// (checkSecretMount), and no container has it in its environment: no
// DATABASE_URL, nothing from that Secret, no Secret's keys as a whole
// (envFrom). It returns the Secret's name.
func checkPostgresSecret(t *testing.T, name string, tmpl map[string]any, urlFile string) string {
	t.Helper()
	secret := ""
	if urlFile != "" {
		secret = checkSecretMount(t, name, tmpl, "postgres.url_file", urlFile)
	}
	for _, c := range append(list(get(tmpl, "spec", "initContainers")), list(get(tmpl, "spec", "containers"))...) {
		for _, e := range list(get(c, "env")) {
			ref, _ := get(e, "valueFrom", "secretKeyRef", "name").(string)
			if get(e, "name") == "DATABASE_URL" || secret != "" && ref == secret {
				t.Errorf("%s: container %v has the PostgreSQL URL in its environment (%v): want postgres.url_file only", name, get(c, "name"), e)
			}
		}
		for _, e := range list(get(c, "envFrom")) {
			if get(e, "secretRef") != nil {
				t.Errorf("%s: container %v takes a Secret's keys into its environment (%v)", name, get(c, "name"), e)
			}
		}
	}
	return secret
}

// checkSecretMount: the file a config key names (ingress.tokens_file,
// postgres.url_file) is a key of a Secret mounted read-only as a directory
// at the file's directory: no subPath (the kubelet never updates one), no
// items (the Secret's keys as they are), readable by the pod's non-root
// user through the pod's fsGroup and by no one else (defaultMode 0440). It
// returns the Secret's name ("" when there is none).
func checkSecretMount(t *testing.T, name string, tmpl map[string]any, key, file string) string {
	t.Helper()
	dir := filepath.Dir(file)
	var vol string
	for _, m := range list(get(tmpl, "spec", "containers", 0, "volumeMounts")) {
		if get(m, "mountPath") != dir {
			continue
		}
		if vol != "" {
			t.Errorf("%s: two volumes are mounted at %s", name, dir)
		}
		vol, _ = get(m, "name").(string)
		if get(m, "subPath") != nil || get(m, "readOnly") != true {
			t.Errorf("%s: mount %v: want the whole Secret, read-only, no subPath", name, m)
		}
	}
	for _, v := range list(get(tmpl, "spec", "volumes")) {
		if vol == "" || get(v, "name") != vol {
			continue
		}
		secret, _ := get(v, "secret", "secretName").(string)
		if secret == "" {
			t.Errorf("%s: %s (%s) is not a Secret: %v", name, dir, key, v)
		}
		if items := list(get(v, "secret", "items")); items != nil {
			t.Errorf("%s: the Secret %s's items %v: want its keys as they are (key %s, %s)", name, secret, items, filepath.Base(file), key)
		}
		// The kubelet writes the files owned by root, group the pod's
		// fsGroup: the non-root user reads them through fsGroup.
		mode, ok := get(v, "secret", "defaultMode").(int)
		if !ok {
			mode = 0o644
		}
		fsGroup := get(tmpl, "spec", "securityContext", "fsGroup") != nil
		if mode&0o040 == 0 || !fsGroup || mode&0o007 != 0 {
			t.Errorf("%s: the Secret %s's defaultMode %#o (fsGroup set: %v): want 0440 and the pod's fsGroup, readable by the pod's user only", name, secret, mode, fsGroup)
		}
		return secret
	}
	t.Errorf("%s: no Secret is mounted at %s, the directory of %s %s", name, dir, key, file)
	return ""
}

// checkIngressMemory: the ingress's memory limit holds its stated bound,
// 4 x ingress.limits.max_concurrent x max body (bodies being read: 2 x
// max_concurrent; requests answered: a body and its copy in the producer's
// batch) + 64 MiB of baseline (ingressconfig.Limits), under GOMEMLIMIT.
func checkIngressMemory(t *testing.T, name string, tmpl map[string]any, cfg config.Config) {
	t.Helper()
	var gml string
	for _, e := range list(get(tmpl, "spec", "containers", 0, "env")) {
		if get(e, "name") == "GOMEMLIMIT" {
			gml, _ = get(e, "value").(string)
		}
	}
	limit, ok := goBytes(gml)
	bound := float64(4*cfg.Ingress.Limits.MaxConcurrent*cfg.IngressMaxBody() + 64<<20)
	if !ok || bound > limit {
		t.Errorf("%s: GOMEMLIMIT %q under the ingress's bound %.0f MiB = 4 x ingress.limits.max_concurrent %d x max body %d KiB + 64 MiB",
			name, gml, bound/(1<<20), cfg.Ingress.Limits.MaxConcurrent, cfg.IngressMaxBody()>>10)
	}
}

// checkPod: a pod template of process (run, worker or ingress) that mounts
// no service-account token, keeps GOMEMLIMIT under its memory limit, is
// probed on its admin port (its PostgreSQL Secret: checkPostgresSecret),
// and has a NetworkPolicy: ingress to the admin port from the monitoring
// namespace (and, for the ingress only, to its http port from one other
// namespace, the ingress controller's), egress to DNS, PostgreSQL,
// Temporal (and Kafka for the routers and the ingress).
func checkPod(t *testing.T, name string, tmpl map[string]any, all []map[string]any, process string) {
	t.Helper()
	if get(tmpl, "spec", "automountServiceAccountToken") != false {
		t.Errorf("%s: automountServiceAccountToken is not false: the pod would mount a token it never uses", name)
	}
	cs := list(get(tmpl, "spec", "containers"))
	if len(cs) != 1 {
		t.Fatalf("%s: %d containers, want 1", name, len(cs))
	}
	c := cs[0]
	env := map[string]any{}
	for _, e := range list(get(c, "env")) {
		env[fmt.Sprint(get(e, "name"))] = e
	}
	gml, _ := get(env["GOMEMLIMIT"], "value").(string)
	lim, _ := get(c, "resources", "limits", "memory").(string)
	checkMemLimit(t, name, gml, lim, k8sBytes)
	gogc, _ := get(env["GOGC"], "value").(string)
	checkGOGC(t, name, gogc, gml)
	if p := get(c, "readinessProbe", "httpGet", "path"); p != "/readyz" {
		t.Errorf("%s: readiness probe %v, want /readyz", name, p)
	}
	live := map[bool]string{true: "/healthz", false: "/livez"}[process == "run"]
	if p := get(c, "livenessProbe", "httpGet", "path"); p != live {
		t.Errorf("%s: liveness probe %v, want %s", name, p, live)
	}
	if get(c, "readinessProbe", "httpGet", "port") != "admin" || get(c, "livenessProbe", "httpGet", "port") != "admin" || get(c, "ports", 0, "name") != "admin" {
		t.Errorf("%s: probes and ports do not use the admin port", name)
	}
	if sp := get(c, "startupProbe"); sp != nil && get(sp, "httpGet", "port") != "admin" {
		t.Errorf("%s: the startup probe does not use the admin port", name)
	}

	var np map[string]any
	for _, p := range kind(all, "NetworkPolicy") {
		if subset(get(p, "spec", "podSelector", "matchLabels"), get(tmpl, "metadata", "labels")) {
			np = p
		}
	}
	if np == nil {
		t.Errorf("%s: no NetworkPolicy selects its pods", name)
		return
	}
	types := fmt.Sprint(get(np, "spec", "policyTypes"))
	if !strings.Contains(types, "Ingress") || !strings.Contains(types, "Egress") {
		t.Errorf("%s: NetworkPolicy policyTypes %s, want Ingress and Egress", name, types)
	}
	// Each ingress rule admits one port from whole namespaces (no pod
	// selector: kustomize's labels transformer would add to it; no
	// ipBlock): the admin port from monitoring, and for the ingress its
	// API port from the ingress controller's namespace.
	ingress := list(get(np, "spec", "ingress"))
	want := map[string]bool{"admin": true}
	if process == "ingress" {
		want["http"] = true
	}
	admitted := map[string]bool{}
	for _, rule := range ingress {
		if len(list(get(rule, "from"))) == 0 {
			t.Errorf("%s: a NetworkPolicy ingress rule admits every source", name)
		}
		ports := list(get(rule, "ports"))
		port, _ := get(ports, 0, "port").(string)
		if len(ports) != 1 || get(ports, 0, "protocol") != "TCP" || !want[port] {
			t.Errorf("%s: NetworkPolicy admits ports %v, want one rule for each of %v", name, ports, slices.Sorted(maps.Keys(want)))
			continue
		}
		if admitted[port] {
			t.Errorf("%s: NetworkPolicy has two ingress rules for port %s", name, port)
		}
		admitted[port] = true
		for _, from := range list(get(rule, "from")) {
			ns, _ := get(from, "namespaceSelector", "matchLabels", "kubernetes.io/metadata.name").(string)
			ok := ns != "" && get(from, "podSelector") == nil && get(from, "ipBlock") == nil
			if port == "admin" && ns != "monitoring" || port == "http" && ns == "monitoring" || !ok {
				t.Errorf("%s: NetworkPolicy admits %v to port %s, want %s", name, from, port,
					map[string]string{"admin": "the monitoring namespace only", "http": "the ingress controller's namespace"}[port])
			}
		}
	}
	if len(admitted) != len(want) {
		t.Errorf("%s: NetworkPolicy admits ports %v, want %v", name, admitted, want)
	}
	egress := map[string]bool{}
	for _, rule := range list(get(np, "spec", "egress")) {
		if len(list(get(rule, "ports"))) == 0 {
			t.Errorf("%s: a NetworkPolicy egress rule allows every port: %v", name, rule)
		}
		for _, to := range list(get(rule, "to")) {
			// kustomize's labels transformer adds the base's labels to a
			// podSelector inside a rule: it would select nothing.
			if get(to, "podSelector") != nil {
				t.Errorf("%s: an egress rule selects pods by label (%v): kustomize adds its labels to it", name, to)
			}
		}
		for _, p := range list(get(rule, "ports")) {
			egress[fmt.Sprintf("%v/%v", get(p, "port"), get(p, "protocol"))] = true
		}
	}
	need := []string{"53/UDP", "53/TCP", "5432/TCP", "7233/TCP"}
	if process == "run" || process == "ingress" {
		need = append(need, "9092/TCP")
	}
	for _, p := range need {
		if !egress[p] {
			t.Errorf("%s: NetworkPolicy allows no egress to port %s", name, p)
		}
	}
}

// The compose demo's Prometheus: rule files relative to the config (as
// promtool and the container both read them), mounted beside it; a job for
// the routers, one for the worker and one for the ingress, at services
// compose runs.
func TestPrometheusConfig(t *testing.T) {
	var p struct {
		RuleFiles     []string `yaml:"rule_files"`
		ScrapeConfigs []struct {
			JobName       string `yaml:"job_name"`
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	readYAML(t, "prometheus/prometheus.yml", &p)
	if len(p.RuleFiles) == 0 || len(p.ScrapeConfigs) == 0 {
		t.Fatalf("prometheus.yml: %+v", p)
	}
	var compose struct {
		Services map[string]struct {
			Volumes []string `yaml:"volumes"`
		} `yaml:"services"`
	}
	readYAML(t, "../docker-compose.yml", &compose)
	mounts := strings.Join(compose.Services["prometheus"].Volumes, " ")
	for _, f := range p.RuleFiles {
		if filepath.IsAbs(f) {
			t.Errorf("rule file %s: absolute; promtool check config reads it relative to prometheus.yml", f)
		}
		if _, err := os.Stat(filepath.Join("prometheus", f)); err != nil {
			t.Errorf("rule file %s: %v", f, err)
		}
		if !strings.Contains(mounts, "./deploy/prometheus/"+f+":/etc/prometheus/"+f) {
			t.Errorf("compose does not mount %s beside prometheus.yml (/etc/prometheus): %s", f, mounts)
		}
	}
	jobs := map[string][]string{}
	for _, sc := range p.ScrapeConfigs {
		for _, s := range sc.StaticConfigs {
			jobs[sc.JobName] = append(jobs[sc.JobName], s.Targets...)
		}
	}
	want := map[string][]string{"dedup": {"dedup-1:9464", "dedup-2:9464"}, "dedup-worker": {"worker:9465"}, "dedup-ingress": {"ingress:9466"}}
	if !reflect.DeepEqual(jobs, want) {
		t.Errorf("scrape jobs %v, want %v", jobs, want)
	}
	for _, targets := range jobs {
		for _, tg := range targets {
			if _, ok := compose.Services[strings.Split(tg, ":")[0]]; !ok {
				t.Errorf("scrape target %s: no such compose service", tg)
			}
		}
	}
	var ds struct {
		Datasources []struct{ Type, URL string } `yaml:"datasources"`
	}
	readYAML(t, "grafana/provisioning/datasources/prometheus.yaml", &ds)
	if len(ds.Datasources) != 1 || ds.Datasources[0].Type != "prometheus" {
		t.Errorf("grafana datasources: %+v", ds)
	}
}

type rule struct {
	Record      string            `yaml:"record"`
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

func readRules(t *testing.T) []rule {
	t.Helper()
	var f struct {
		Groups []struct {
			Rules []rule `yaml:"rules"`
		} `yaml:"groups"`
	}
	readYAML(t, "prometheus/rules.yml", &f)
	var out []rule
	for _, g := range f.Groups {
		out = append(out, g.Rules...)
	}
	if len(out) == 0 {
		t.Fatal("rules.yml has no rules")
	}
	return out
}

const runbookURL = "https://github.com/dedupio/dedup/blob/main/docs/runbook.md#"

// Every alert says what fired and links to its section of the runbook: an
// anchor GitHub generates for a heading of docs/runbook.md.
func TestAlertsAnnotatedAndLinked(t *testing.T) {
	anchors := markdownAnchors(t, "../docs/runbook.md")
	for _, r := range readRules(t) {
		if r.Alert == "" {
			continue
		}
		for _, a := range []string{"summary", "description", "runbook_url"} {
			if strings.TrimSpace(r.Annotations[a]) == "" {
				t.Errorf("alert %s has no %s", r.Alert, a)
			}
		}
		if r.Labels["severity"] != "warning" && r.Labels["severity"] != "critical" {
			t.Errorf("alert %s: severity %q, want warning or critical", r.Alert, r.Labels["severity"])
		}
		u := r.Annotations["runbook_url"]
		anchor, ok := strings.CutPrefix(u, runbookURL)
		if !ok {
			t.Errorf("alert %s: runbook_url %q, want %sANCHOR", r.Alert, u, runbookURL)
		} else if !anchors[anchor] {
			t.Errorf("alert %s: runbook_url %s: docs/runbook.md has no heading with anchor #%s", r.Alert, u, anchor)
		}
	}
	// The README's and the runbook's own links into the runbook resolve too.
	for _, doc := range []string{"../README.md", "../docs/runbook.md"} {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile(`\]\((?:docs/)?(runbook\.md)?#([^)]+)\)`).FindAllStringSubmatch(string(b), -1) {
			if (m[1] != "" || doc == "../docs/runbook.md") && !anchors[m[2]] {
				t.Errorf("%s links to runbook.md#%s, which is no heading", doc, m[2])
			}
		}
	}
}

// markdownAnchors are the anchors GitHub generates for a file's headings:
// lower case, spaces to hyphens, punctuation other than - and _ dropped,
// -1, -2… on repeats. Lines in code fences are no headings.
func markdownAnchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	fenced := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
		}
		h := regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`).FindStringSubmatch(line)
		if fenced || h == nil {
			continue
		}
		var a strings.Builder
		for _, r := range strings.ToLower(h[1]) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				a.WriteRune(r)
			case r == ' ':
				a.WriteRune('-')
			}
		}
		anchor := a.String()
		for i := 1; anchors[anchor]; i++ {
			anchor = fmt.Sprintf("%s-%d", a.String(), i)
		}
		anchors[anchor] = true
	}
	return anchors
}

// rules_test.yml makes every alert fire at least once and stay quiet at
// least once (promtool runs it: make rules).
func TestEveryAlertTested(t *testing.T) {
	var f struct {
		RuleFiles []string `yaml:"rule_files"`
		Tests     []struct {
			AlertRuleTest []struct {
				Alertname string `yaml:"alertname"`
				ExpAlerts []any  `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	readYAML(t, "prometheus/rules_test.yml", &f)
	if !reflect.DeepEqual(f.RuleFiles, []string{"rules.yml"}) {
		t.Errorf("rules_test.yml tests %v, want [rules.yml]", f.RuleFiles)
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range f.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	for _, r := range readRules(t) {
		if r.Alert != "" && (!fires[r.Alert] || !quiet[r.Alert]) {
			t.Errorf("rules_test.yml: alert %s fires in a test: %v, stays quiet in one: %v; want both", r.Alert, fires[r.Alert], quiet[r.Alert])
		}
	}
}

var aggregation = regexp.MustCompile(`\b(sum|min|max|avg|count|stddev|stdvar|group|topk|bottomk|quantile)\s*(by\s*\(([^)]*)\)|without\s*\([^)]*\))?\s*\(`)

// Recording rules and alerts keep `job` through every aggregation, so that
// two deployments scraped by one Prometheus stay apart (absent() has no
// labels to keep).
func TestRulesKeepJob(t *testing.T) {
	for _, r := range readRules(t) {
		for _, m := range aggregation.FindAllStringSubmatch(r.Expr, -1) {
			if m[2] == "" || !slices.Contains(strings.Fields(strings.ReplaceAll(m[3], ",", " ")), "job") {
				t.Errorf("%s%s: %q drops job: want %s by (job, ...)", r.Record, r.Alert, m[0], m[1])
			}
		}
	}
}

// The dashboard: every query follows the job (router, worker or ingress)
// and instance variables and uses $__rate_interval, every panel says what
// it shows, and rows show the worker and the ingress.
func TestDashboard(t *testing.T) {
	var dash struct {
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
		Panels []struct {
			Type        string `json:"type"`
			Title       string `json:"title"`
			Description string `json:"description"`
			Targets     []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	b, err := os.ReadFile("grafana/dashboards/dedup.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatal(err)
	}
	vars := map[string]bool{}
	for _, v := range dash.Templating.List {
		vars[v.Name] = true
	}
	for _, v := range []string{"datasource", "job", "worker_job", "ingress_job", "instance"} {
		if !vars[v] {
			t.Errorf("dashboard has no %s variable", v)
		}
	}
	selector := regexp.MustCompile(`\b((?:dedup|kafka|temporal|go|process)_[a-zA-Z0-9_]+|up)\b(\{[^}]*\})?`)
	workerRow, ingressRow := map[string]bool{}, map[string]bool{}
	for _, p := range dash.Panels {
		if strings.TrimSpace(p.Description) == "" {
			t.Errorf("panel %q has no description", p.Title)
		}
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			for _, r := range regexp.MustCompile(`\[[^\]]*\]`).FindAllString(tg.Expr, -1) {
				if r != "[$__rate_interval]" {
					t.Errorf("panel %q: range %s in %s: want [$__rate_interval]", p.Title, r, tg.Expr)
				}
			}
			for _, m := range selector.FindAllStringSubmatch(tg.Expr, -1) {
				job := `job=~"$job"`
				if strings.Contains(tg.Expr, "$worker_job") {
					job = `job=~"$worker_job"`
					workerRow[m[1]] = true
				}
				if strings.Contains(tg.Expr, "$ingress_job") {
					job = `job=~"$ingress_job"`
					ingressRow[m[1]] = true
				}
				if !strings.Contains(m[2], job) || !strings.Contains(m[2], `instance=~"$instance"`) {
					t.Errorf("panel %q: %s%s does not select %s and instance=~\"$instance\"", p.Title, m[1], m[2], job)
				}
			}
		}
	}
	// What `dedup worker` exports on its admin port.
	for _, m := range []string{"dedup_dependency_up", "dedup_build_info", "temporal_worker_task_slots_available", "temporal_activity_execution_latency_seconds_bucket"} {
		if !workerRow[m] {
			t.Errorf("the worker row does not show %s", m)
		}
	}
	// What `dedup ingress` exports on its admin port.
	for _, m := range []string{"dedup_ingress_requests_total", "dedup_ingress_request_duration_seconds_bucket", "dedup_ingress_lock_degraded_total"} {
		if !ingressRow[m] {
			t.Errorf("the ingress row does not show %s", m)
		}
	}
}
