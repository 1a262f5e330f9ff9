package deploy

// Adversary 55a: the router's GOGC=200 (434b556, 370e3eb) and checkGOGC.
// The claim: no shipped manifest can run a dedup process with a GOGC that is
// off, out of range or without GOMEMLIMIT, and the tests would catch one
// that did. These tests mutate a copy of the shipped tree the way an
// overlay, a component or a compose file can, render it as kustomize
// (kubectl kustomize) resolves it, and run the shipped TestKustomize or
// TestCompose on the copy: a mutation those tests accept is a gap.

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// adv55aTree copies what TestCompose and TestKustomize read (the
// repository's docker-compose.yml, Dockerfile and deploy/; sink/ as a
// link) into a temporary root, and returns the root.
func adv55aTree(t *testing.T) string {
	t.Helper()
	repo, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	for _, f := range []string{"docker-compose.yml", "Dockerfile"} {
		b, err := os.ReadFile(filepath.Join(repo, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(repo, "sink"), filepath.Join(root, "sink")); err != nil {
		t.Fatal(err)
	}
	err = filepath.WalkDir(filepath.Join(repo, "deploy"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(repo, p)
		if err != nil {
			return err
		}
		dst := filepath.Join(root, rel)
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// adv55aEdit replaces old (which must be in the file once) with new.
func adv55aEdit(t *testing.T, path, old, new string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(string(b), old) != 1 {
		t.Fatalf("%s: %q is not in it once: the shipped file changed, adapt the mutation", path, old)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(string(b), old, new, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
}

func adv55aAppend(t *testing.T, path, text string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, append(b, text...), 0o644); err != nil {
		t.Fatal(err)
	}
}

// adv55aRun runs the shipped test name (TestCompose, TestKustomize) of
// this test binary with root/deploy as its directory, so that it reads the
// copy; it reports whether the test passed.
func adv55aRun(t *testing.T, root, name string, env ...string) (bool, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run", "^"+name+"$", "-test.count=1", "-test.v")
	cmd.Dir = filepath.Join(root, "deploy")
	// The copy has no bin/: the child renders with the parent's kustomize.
	cmd.Env = append(os.Environ(), "DEDUP_KUSTOMIZE="+strings.Join(kustomizeBin(t), " "))
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
	if err == nil && !strings.Contains(string(out), "--- PASS: "+name) {
		t.Fatalf("%s did not run:\n%s", name, out)
	}
	return err == nil, string(out)
}

// adv55aControl: the shipped test passes on the unmutated copy (so that a
// pass on a mutated one is the mutation's, not the copy's).
func adv55aControl(t *testing.T, name string) {
	t.Helper()
	if ok, out := adv55aRun(t, adv55aTree(t), name); !ok {
		t.Fatalf("%s fails on an unmutated copy of the tree:\n%s", name, out)
	}
}

// adv55aKustomize renders dir as the shipped tests do (kustomizeBuild).
func adv55aKustomize(t *testing.T, dir string) []map[string]any {
	t.Helper()
	return kustomizeBuild(t, dir)
}

// adv55aEnv is a container's environment as the kubelet builds it: envFrom
// first (ConfigMaps' keys), then env in order, the last of a name winning;
// valueFrom a ConfigMap's key resolved from the rendered docs. A name whose
// value comes from elsewhere (a Secret, a field) maps to "?".
func adv55aEnv(docs []map[string]any, c any) map[string]string {
	cm := func(name string) map[string]any {
		for _, d := range kind(docs, "ConfigMap") {
			if get(d, "metadata", "name") == name {
				m, _ := get(d, "data").(map[string]any)
				return m
			}
		}
		return nil
	}
	env := map[string]string{}
	for _, e := range list(get(c, "envFrom")) {
		if name, ok := get(e, "configMapRef", "name").(string); ok {
			for k, v := range cm(name) {
				env[k] = adv55aString(v)
			}
		}
	}
	for _, e := range list(get(c, "env")) {
		name := adv55aString(get(e, "name"))
		switch {
		case get(e, "valueFrom", "configMapKeyRef") != nil:
			ref, _ := get(e, "valueFrom", "configMapKeyRef", "name").(string)
			key, _ := get(e, "valueFrom", "configMapKeyRef", "key").(string)
			env[name] = adv55aString(cm(ref)[key])
		case get(e, "valueFrom") != nil:
			env[name] = "?"
		default:
			env[name] = adv55aString(get(e, "value"))
		}
	}
	return env
}

func adv55aString(v any) string {
	if v == nil {
		return ""
	}
	if s, ok := v.(string); ok {
		return s
	}
	b, _ := yaml.Marshal(v)
	return strings.TrimSpace(string(b))
}

// adv55aBadGC says what is wrong with a dedup process's GOGC and
// GOMEMLIMIT as the runtime reads them ("" when nothing): GOGC set is a
// number from 100 to 400, beside a GOMEMLIMIT.
func adv55aBadGC(env map[string]string) string {
	gogc, set := env["GOGC"]
	if !set || gogc == "" {
		return ""
	}
	n, err := strconv.ParseInt(gogc, 10, 32) // runtime.readGOGC
	if err != nil && gogc != "off" {
		n, err = 100, nil
	}
	if err != nil || n < 100 || n > 400 {
		return "GOGC " + strconv.Quote(gogc)
	}
	if env["GOMEMLIMIT"] == "" || env["GOMEMLIMIT"] == "off" {
		return "GOGC " + gogc + " without GOMEMLIMIT"
	}
	return ""
}

// adv55aRendered: what the rendering of dir runs in container 0 of the
// workload named name (Deployment or Job), as the kubelet resolves it.
func adv55aRendered(t *testing.T, dir, name string) map[string]string {
	t.Helper()
	docs := adv55aKustomize(t, dir)
	for _, w := range append(kind(docs, "Deployment"), kind(docs, "Job")...) {
		if get(w, "metadata", "name") == name {
			return adv55aEnv(docs, get(w, "spec", "template", "spec", "containers", 0))
		}
	}
	t.Fatalf("%s renders no workload %s", dir, name)
	return nil
}

// adversary 55a: an overlay under deploy/k8s/overlays may patch a
// Deployment's environment (kustomize's patches: strategic merge or JSON
// 6902), and `make k8s` renders it; TestKustomize reads the base's and the
// components' files as they are and only checks that an overlay's
// resources and components exist, so a patch that turns the router's GOGC
// off, gives the worker GOGC=off, or removes the GOMEMLIMIT beside the
// router's GOGC=200 passes it. Each mutation is rendered with kubectl
// kustomize to show the rendered pod runs it.
func TestAnOverlayPatchThatBreaksGOGCFailsTestKustomize(t *testing.T) {
	adv55aControl(t, "TestKustomize")
	for _, m := range []struct {
		name, workload, patch string
	}{
		{"strategic merge: router GOGC off", "dedup", `
patches:
  - patch: |-
      apiVersion: apps/v1
      kind: Deployment
      metadata: {name: dedup}
      spec:
        template:
          spec:
            containers:
              - name: dedup
                env:
                  - {name: GOGC, value: "off"}
`},
		{"json6902: worker GOGC off", "dedup-worker", `
patches:
  - target: {kind: Deployment, name: dedup-worker}
    patch: |-
      - op: add
        path: /spec/template/spec/containers/0/env/-
        value: {name: GOGC, value: "off"}
`},
		{"json6902: router GOGC=200 without GOMEMLIMIT", "dedup", `
patches:
  - target: {kind: Deployment, name: dedup}
    patch: |-
      - op: test
        path: /spec/template/spec/containers/0/env/0/name
        value: GOMEMLIMIT
      - op: remove
        path: /spec/template/spec/containers/0/env/0
`},
	} {
		t.Run(m.name, func(t *testing.T) {
			root := adv55aTree(t)
			overlay := filepath.Join(root, "deploy/k8s/overlays/full")
			adv55aAppend(t, filepath.Join(overlay, "kustomization.yaml"), m.patch)
			env := adv55aRendered(t, overlay, m.workload)
			bad := adv55aBadGC(env)
			if bad == "" {
				t.Fatalf("the mutation did not take: %s renders GOGC %q GOMEMLIMIT %q", m.workload, env["GOGC"], env["GOMEMLIMIT"])
			}
			if ok, _ := adv55aRun(t, root, "TestKustomize"); ok {
				t.Errorf("overlays/full renders %s with %s (GOGC %q, GOMEMLIMIT %q), and TestKustomize passes", m.workload, bad, env["GOGC"], env["GOMEMLIMIT"])
			}
		})
	}
}

// adversary 55a: checkPod and checkJob read GOGC from env[].value only. A
// GOGC from a ConfigMap, by valueFrom (configMapKeyRef) or by envFrom
// (configMapRef; kustomize's configMapGenerator makes one), is what the
// kubelet runs, and TestKustomize passes it as unset: the router's
// GOGC=200 turned into a ConfigMap key that says off, or the worker taking
// GOGC=off from a generated ConfigMap.
func TestGOGCFromAConfigMapFailsTestKustomize(t *testing.T) {
	adv55aControl(t, "TestKustomize")
	t.Run("valueFrom: router", func(t *testing.T) {
		root := adv55aTree(t)
		base := filepath.Join(root, "deploy/k8s/base")
		adv55aEdit(t, filepath.Join(base, "deployment.yaml"),
			"- name: GOGC\n              value: \"200\"",
			"- name: GOGC\n              valueFrom: {configMapKeyRef: {name: dedup-gc, key: GOGC}}")
		adv55aAppend(t, filepath.Join(base, "kustomization.yaml"), "configMapGenerator:\n  - name: dedup-gc\n    literals: [GOGC=off]\n")
		env := adv55aRendered(t, filepath.Join(root, "deploy/k8s/overlays/full"), "dedup")
		bad := adv55aBadGC(env)
		if bad == "" {
			t.Fatalf("the mutation did not take: GOGC %q", env["GOGC"])
		}
		if ok, _ := adv55aRun(t, root, "TestKustomize"); ok {
			t.Errorf("the router runs %s from a ConfigMap (valueFrom), and TestKustomize passes", bad)
		}
	})
	t.Run("envFrom: worker", func(t *testing.T) {
		root := adv55aTree(t)
		comp := filepath.Join(root, "deploy/k8s/components/worker")
		adv55aEdit(t, filepath.Join(comp, "deployment.yaml"),
			"          env:\n",
			"          envFrom:\n            - configMapRef: {name: dedup-worker-gc}\n          env:\n")
		adv55aAppend(t, filepath.Join(comp, "kustomization.yaml"), "configMapGenerator:\n  - name: dedup-worker-gc\n    literals: [GOGC=off]\n")
		env := adv55aRendered(t, filepath.Join(root, "deploy/k8s/overlays/full"), "dedup-worker")
		bad := adv55aBadGC(env)
		if bad == "" {
			t.Fatalf("the mutation did not take: GOGC %q", env["GOGC"])
		}
		if ok, _ := adv55aRun(t, root, "TestKustomize"); ok {
			t.Errorf("the worker runs %s from a generated ConfigMap (envFrom), and TestKustomize passes", bad)
		}
	})
}

// adversary 55a: TestCompose reads docker-compose.yml's environment maps
// only. docker compose also gives a container what an env_file lists
// (under environment: the worker and the ingress set no GOGC, so the
// file's wins) and merges a docker-compose.override.yml beside
// docker-compose.yml (`make compose` runs `docker compose up` without -f,
// so it loads one): either sets GOGC=off on a dedup process, and
// TestCompose passes.
func TestComposeGOGCFromAnEnvFileOrOverrideFailsTestCompose(t *testing.T) {
	adv55aControl(t, "TestCompose")
	t.Run("env_file", func(t *testing.T) {
		root := adv55aTree(t)
		if err := os.WriteFile(filepath.Join(root, "deploy/compose/gc.env"), []byte("GOGC=off\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		adv55aEdit(t, filepath.Join(root, "docker-compose.yml"),
			"    command: [\"worker\", \"--config\", \"/etc/dedup/dedup.yaml\"]\n",
			"    command: [\"worker\", \"--config\", \"/etc/dedup/dedup.yaml\"]\n    env_file: [./deploy/compose/gc.env]\n")
		if ok, _ := adv55aRun(t, root, "TestCompose"); ok {
			t.Error("the compose worker takes GOGC=off from env_file ./deploy/compose/gc.env, and TestCompose passes")
		}
	})
	t.Run("docker-compose.override.yml", func(t *testing.T) {
		root := adv55aTree(t)
		override := "services:\n  dedup-1:\n    environment:\n      GOGC: \"off\"\n  worker:\n    environment:\n      GOGC: \"1000\"\n"
		if err := os.WriteFile(filepath.Join(root, "docker-compose.override.yml"), []byte(override), 0o644); err != nil {
			t.Fatal(err)
		}
		if ok, _ := adv55aRun(t, root, "TestCompose"); ok {
			t.Error("docker-compose.override.yml (merged by `docker compose up`) sets dedup-1's GOGC off and the worker's 1000, and TestCompose passes")
		}
	})
}

// adversary 55a: in compose, an environment key with no value (`GOGC:`)
// passes the variable of the shell that runs `docker compose up` into the
// container; checkGOGC reads the empty string as unset and passes it, so
// whatever GOGC the operator's shell has (off, 1000) reaches the routers.
func TestComposeGOGCWithoutAValueFailsTestCompose(t *testing.T) {
	adv55aControl(t, "TestCompose")
	root := adv55aTree(t)
	adv55aEdit(t, filepath.Join(root, "docker-compose.yml"), "    GOGC: \"200\" ", "    GOGC:       ")
	if ok, _ := adv55aRun(t, root, "TestCompose"); ok {
		t.Error("x-dedup's `GOGC:` with no value (the routers take the shell's GOGC, e.g. off) passes TestCompose")
	}
}

// adversary 55a (holds): checkGOGC parses GOGC as Go's runtime does
// (runtime.readGOGC: "off", else strconv.ParseInt(s, 10, 32), else 100):
// every spelling it accepts, the runtime reads as a number from 100 to 400
// (+200, 0200 included), and it refuses off, OFF, spaces, 2e2.
func TestCheckGOGCAcceptsOnlyWhatTheRuntimeReadsInRange(t *testing.T) {
	if v, ok := os.LookupEnv("ADV55A_CHECK_GOGC"); ok {
		checkGOGC(t, "probe", v, "230MiB")
		return
	}
	if os.Getenv("ADV55A_READ_GOGC") != "" {
		t.Logf("runtime GOGC=%d", debug.SetGCPercent(100))
		return
	}
	for _, v := range []string{"200", "+200", "0200", "00200", "+0200", " 200", "200 ", "200\n", "2e2", "200.0", "0x64",
		"1_00", "off", "OFF", "Off", " off", "-1", "0", "99", "100", "400", "401", "4294967496", "-4294967096", "２００"} {
		accepted, _ := adv55aProbe(t, "TestCheckGOGCAcceptsOnlyWhatTheRuntimeReadsInRange", "ADV55A_CHECK_GOGC="+v)
		_, out := adv55aProbe(t, "TestCheckGOGCAcceptsOnlyWhatTheRuntimeReadsInRange", "ADV55A_READ_GOGC=1", "GOGC="+v)
		_, after, found := strings.Cut(out, "runtime GOGC=")
		if !found {
			t.Fatalf("GOGC=%q: the probe printed no runtime GOGC:\n%s", v, out)
		}
		n, err := strconv.Atoi(strings.Fields(after)[0])
		if err != nil {
			t.Fatal(err)
		}
		if accepted && (n < 100 || n > 400) {
			t.Errorf("checkGOGC accepts GOGC=%q, which the runtime reads as %d", v, n)
		}
		t.Logf("GOGC=%q: checkGOGC accepts %v, runtime %d", v, accepted, n)
	}
}

// adversary 55a (holds): every workload kustomize renders from the base
// and each overlay (Deployments, Jobs; containers and init containers), its
// environment resolved as the kubelet does (envFrom, valueFrom, the last
// of a name), runs a GOGC from 100 to 400 beside a GOMEMLIMIT, or none.
func TestEveryRenderedDedupContainerRunsGOGCInRangeBesideGOMEMLIMIT(t *testing.T) {
	dirs, _ := filepath.Glob("k8s/overlays/*")
	for _, dir := range append([]string{"k8s/base"}, dirs...) {
		docs := adv55aKustomize(t, dir)
		for _, k := range []string{"Deployment", "StatefulSet", "DaemonSet", "Job", "Pod", "CronJob"} {
			for _, w := range kind(docs, k) {
				spec := get(w, "spec", "template", "spec")
				switch k {
				case "Pod":
					spec = get(w, "spec")
				case "CronJob":
					spec = get(w, "spec", "jobTemplate", "spec", "template", "spec")
				}
				for _, c := range append(list(get(spec, "initContainers")), list(get(spec, "containers"))...) {
					env := adv55aEnv(docs, c)
					if bad := adv55aBadGC(env); bad != "" || env["GOGC"] == "?" || env["GOMEMLIMIT"] == "?" {
						t.Errorf("%s: %s %v container %v: %s (GOGC %q, GOMEMLIMIT %q)", dir, k, get(w, "metadata", "name"), get(c, "name"), bad, env["GOGC"], env["GOMEMLIMIT"])
					}
				}
			}
		}
	}
}

// adversary 55a: the image's own environment is every container's
// default: an `ENV GOGC=off` in the Dockerfile's final stage reaches each
// dedup process that sets no GOGC (the worker, the ingress and migrate, in
// compose and in Kubernetes alike), and TestDockerfile, TestCompose and
// TestKustomize all pass it: none reads the image's ENV.
func TestADockerfileGOGCFailsTheDeployTests(t *testing.T) {
	tests := []string{"TestDockerfile", "TestCompose", "TestKustomize"}
	for _, name := range tests {
		adv55aControl(t, name)
	}
	root := adv55aTree(t)
	adv55aEdit(t, filepath.Join(root, "Dockerfile"), "USER nonroot:nonroot\n", "USER nonroot:nonroot\nENV GOGC=off\n")
	passed := 0
	for _, name := range tests {
		if ok, _ := adv55aRun(t, root, name); ok {
			passed++
		}
	}
	if passed == len(tests) {
		t.Errorf("the image sets ENV GOGC=off (the worker, the ingress and migrate run without a collector), and %v all pass", tests)
	}
}

// adversary 55a: checkGOGC takes any non-empty GOMEMLIMIT as the bound
// beside GOGC=200, and checkMemLimit reads GOMEMLIMIT with ParseFloat: a
// GOMEMLIMIT the runtime refuses (runtime.parseByteCount takes an integer
// and a unit only) passes both, and every dedup process it is set on
// exits at start ("malformed GOMEMLIMIT"): 230.5MiB, 2.4e8B, NaNMiB.
func TestCheckMemLimitAcceptsOnlyAGOMEMLIMITTheRuntimeReads(t *testing.T) {
	if v, ok := os.LookupEnv("ADV55A_CHECK_GOMEMLIMIT"); ok {
		checkMemLimit(t, "probe", v, "256Mi", k8sBytes)
		checkGOGC(t, "probe", "200", v)
		return
	}
	if os.Getenv("ADV55A_READ_GOMEMLIMIT") != "" {
		t.Logf("runtime GOMEMLIMIT=%d", debug.SetMemoryLimit(-1))
		return
	}
	for _, v := range []string{"230MiB", "235520KiB", "241172480B", "+230MiB", "0230MiB", "230.5MiB", "2.4e8B", "NaNMiB", "0x1.cp27B"} {
		accepted, _ := adv55aProbe(t, "TestCheckMemLimitAcceptsOnlyAGOMEMLIMITTheRuntimeReads", "ADV55A_CHECK_GOMEMLIMIT="+v)
		_, out := adv55aProbe(t, "TestCheckMemLimitAcceptsOnlyAGOMEMLIMITTheRuntimeReads", "ADV55A_READ_GOMEMLIMIT=1", "GOMEMLIMIT="+v)
		_, after, found := strings.Cut(out, "runtime GOMEMLIMIT=")
		read := "exits at start"
		if found {
			read = strings.Fields(after)[0]
		} else if !strings.Contains(out, "malformed GOMEMLIMIT") {
			t.Fatalf("GOMEMLIMIT=%q: the probe printed neither the limit nor the runtime's refusal:\n%s", v, out)
		}
		want, _ := goBytes(v)
		if accepted && read != strconv.FormatInt(int64(want), 10) {
			t.Errorf("checkMemLimit and checkGOGC accept GOMEMLIMIT=%q (%.0f bytes), which the runtime reads as: %s", v, want, read)
		}
		t.Logf("GOMEMLIMIT=%q: accepted %v, runtime %s", v, accepted, read)
	}
}

// adv55aProbe runs the test name of this binary with env added.
func adv55aProbe(t *testing.T, name string, env ...string) (bool, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run", "^"+name+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return err == nil, string(out)
}

// adversary 55a (holds): the router's figures agree wherever they are
// given: in every rendering (base, each overlay) and in compose's routers,
// a 256Mi limit, GOMEMLIMIT 230MiB and GOGC 200 (and in Kubernetes a
// 192Mi request, over the 165 MiB peak the runbook gives); the runbook and
// security.md say the same.
func TestTheRoutersGCFiguresAgreeAcrossManifestsAndDocs(t *testing.T) {
	dirs, _ := filepath.Glob("k8s/overlays/*")
	for _, dir := range append([]string{"k8s/base"}, dirs...) {
		docs := adv55aKustomize(t, dir)
		n := 0
		for _, d := range kind(docs, "Deployment") {
			c := get(d, "spec", "template", "spec", "containers", 0)
			if get(c, "args", 0) != "run" {
				continue
			}
			n++
			env := adv55aEnv(docs, c)
			got := [4]any{get(c, "resources", "requests", "memory"), get(c, "resources", "limits", "memory"), env["GOMEMLIMIT"], env["GOGC"]}
			if want := [4]any{"192Mi", "256Mi", "230MiB", "200"}; got != want {
				t.Errorf("%s: router request, limit, GOMEMLIMIT, GOGC %v, want %v", dir, got, want)
			}
		}
		if n != 1 {
			t.Errorf("%s renders %d router Deployments, want 1", dir, n)
		}
	}
	var compose struct {
		Services map[string]struct {
			Environment map[string]string `yaml:"environment"`
			MemLimit    string            `yaml:"mem_limit"`
		} `yaml:"services"`
	}
	readYAML(t, "../docker-compose.yml", &compose)
	for _, name := range []string{"dedup-1", "dedup-2"} {
		s := compose.Services[name]
		if got, want := [3]string{s.MemLimit, s.Environment["GOMEMLIMIT"], s.Environment["GOGC"]}, [3]string{"256m", "230MiB", "200"}; got != want {
			t.Errorf("compose %s: mem_limit, GOMEMLIMIT, GOGC %v, want %v", name, got, want)
		}
	}
	for doc, says := range map[string][]string{
		"../docs/runbook.md":   {"sets `GOGC=200`", "peak RSS of 165 MiB", "So the memory request is 192Mi"},
		"../docs/security.md":  {"`230MiB` of `256Mi`, with `GOGC=200`"},
		"../docs/benchmark.md": {"with 165 MiB (114 MiB) under `GOGC=200`", "The shipped router now sets `GOGC=200`"},
	} {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		text := strings.Join(strings.Fields(string(b)), " ")
		for _, s := range says {
			if !strings.Contains(text, s) {
				t.Errorf("%s does not say %q", doc, s)
			}
		}
	}
}
