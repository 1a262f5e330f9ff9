package deploy

// The collector's bounds of every dedup process as it is run, not as one
// file says: GOMEMLIMIT about 90% of the container's memory limit, and a
// GOGC, where set, from 100 to 400 beside it (checkMemLimit, checkGOGC).
// Kubernetes is checked on what kustomize renders for the base and every
// overlay, each container's environment resolved as the kubelet does
// (adversary 55a: a patch, a ConfigMap by valueFrom or envFrom passed the
// checks of the files as written); compose and the image refuse the paths
// its check cannot follow (env_file, an override file, a value taken from
// the shell, the image's own ENV).

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// kustomizeBin is the command the tests render a kustomization with, its
// directory the last argument: DEDUP_KUSTOMIZE (a command line, such as
// "kubectl kustomize"), else the pinned kustomize `make k8s` builds (make
// test builds it before the tests), else kustomize or kubectl on PATH.
// Empty when none is there.
func kustomizeBin(t *testing.T) []string {
	t.Helper()
	if k := strings.Fields(os.Getenv("DEDUP_KUSTOMIZE")); len(k) > 0 {
		return k
	}
	if mk, err := os.ReadFile("../Makefile"); err == nil {
		if m := regexp.MustCompile(`(?m)^KUSTOMIZE_VERSION = (\S+)$`).FindSubmatch(mk); m != nil {
			p, err := filepath.Abs(filepath.Join("..", "bin", "tools", "kustomize-"+string(m[1]), "kustomize"))
			if err == nil {
				if _, err := os.Stat(p); err == nil {
					return []string{p, "build"}
				}
			}
		}
	}
	if p, err := exec.LookPath("kustomize"); err == nil {
		return []string{p, "build"}
	}
	if p, err := exec.LookPath("kubectl"); err == nil {
		return []string{p, "kustomize"}
	}
	return nil
}

// kustomizeBuild renders dir (relative to deploy/) as `make k8s` does.
func kustomizeBuild(t *testing.T, dir string) []map[string]any {
	t.Helper()
	k := kustomizeBin(t)
	if k == nil {
		t.Skip("no kustomize to render the manifests with: `make k8s` builds the pinned one")
	}
	cmd := strings.Join(append(k, dir), " ")
	out, err := exec.Command(k[0], append(k[1:], dir)...).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("%s: %v\n%s", cmd, err, ee.Stderr)
		}
		t.Fatalf("%s: %v", cmd, err)
	}
	var docs []map[string]any
	dec := yaml.NewDecoder(bytes.NewReader(out))
	for {
		var doc map[string]any
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("rendering %s: %v", dir, err)
		}
		if doc != nil {
			docs = append(docs, doc)
		}
	}
	return docs
}

// podSpecs are the pod templates of every workload in docs, by where.
func podSpecs(docs []map[string]any) map[string]any {
	specs := map[string]any{}
	for _, k := range []string{"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob", "Pod"} {
		for _, w := range kind(docs, k) {
			spec := get(w, "spec", "template", "spec")
			switch k {
			case "Pod":
				spec = get(w, "spec")
			case "CronJob":
				spec = get(w, "spec", "jobTemplate", "spec", "template", "spec")
			}
			specs[k+" "+stringOf(get(w, "metadata", "name"))] = spec
		}
	}
	return specs
}

// unknownEnv stands for a value the manifests do not say (a Secret's, a
// field's, a resource's).
const unknownEnv = "\x00unknown"

// containerEnv is a container's environment as the kubelet builds it:
// envFrom first, in order (a ConfigMap's keys, with its prefix), then env
// in order, the last of a name winning; a ConfigMap's key by valueFrom is
// looked up in docs. What comes from elsewhere is unknownEnv; opaque says
// an envFrom whose keys are not in docs (a Secret's) may set any name env
// does not.
func containerEnv(docs []map[string]any, c any) (env map[string]string, opaque bool) {
	configMap := func(name string) (map[string]any, bool) {
		for _, d := range kind(docs, "ConfigMap") {
			if get(d, "metadata", "name") == name {
				m, _ := get(d, "data").(map[string]any)
				return m, true
			}
		}
		return nil, false
	}
	env = map[string]string{}
	for _, e := range list(get(c, "envFrom")) {
		name, isCM := get(e, "configMapRef", "name").(string)
		data, found := configMap(name)
		if !isCM || !found {
			opaque = true
			continue
		}
		prefix := stringOf(get(e, "prefix"))
		for k, v := range data {
			env[prefix+k] = stringOf(v)
		}
	}
	for _, e := range list(get(c, "env")) {
		name := stringOf(get(e, "name"))
		switch ref := get(e, "valueFrom", "configMapKeyRef"); {
		case ref != nil:
			data, _ := configMap(stringOf(get(ref, "name")))
			v, ok := data[stringOf(get(ref, "key"))]
			if !ok {
				env[name] = unknownEnv
				continue
			}
			env[name] = stringOf(v)
		case get(e, "valueFrom") != nil:
			env[name] = unknownEnv
		default:
			env[name] = stringOf(get(e, "value"))
		}
	}
	return env, opaque
}

func stringOf(v any) string {
	switch s := v.(type) {
	case nil:
		return ""
	case string:
		return s
	}
	b, _ := yaml.Marshal(v)
	return strings.TrimSpace(string(b))
}

// checkRenderedHeaps: in what kustomize renders for the base and every
// overlay, every container and init container of every workload (each
// runs dedup's image) bounds its heap: GOMEMLIMIT said in the manifests
// and about 90% of its memory limit, GOGC from 100 to 400 beside it or
// unset; neither from a Secret, a field or a resource, nor left to an
// envFrom whose keys the manifests do not show.
func checkRenderedHeaps(t *testing.T) {
	dirs, err := filepath.Glob("k8s/overlays/*")
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range append([]string{"k8s/base"}, dirs...) {
		docs := kustomizeBuild(t, dir)
		n := 0
		for where, spec := range podSpecs(docs) {
			for _, c := range append(list(get(spec, "initContainers")), list(get(spec, "containers"))...) {
				n++
				name := dir + ": " + where + " container " + stringOf(get(c, "name"))
				env, opaque := containerEnv(docs, c)
				for _, v := range []string{"GOMEMLIMIT", "GOGC"} {
					if val, set := env[v]; val == unknownEnv || !set && opaque {
						t.Errorf("%s: %s comes from outside the manifests (a Secret, a field, a resource, an envFrom of keys not shown): the collector's bounds must be said where this check reads them", name, v)
					}
				}
				gml, gogc := env["GOMEMLIMIT"], env["GOGC"]
				if gml == unknownEnv || gogc == unknownEnv {
					continue
				}
				lim, _ := get(c, "resources", "limits", "memory").(string)
				checkMemLimit(t, name, gml, lim, k8sBytes)
				checkGOGC(t, name, gogc, gml)
			}
		}
		if n == 0 {
			t.Errorf("%s renders no container", dir)
		}
	}
}

// composeFilesBesides are the files docker compose reads beside (or
// instead of) docker-compose.yml from the same directory: one would change
// a dedup process's environment where TestCompose does not look.
var composeFilesBesides = []string{"compose.yaml", "compose.yml", "compose.override.yaml", "compose.override.yml",
	"docker-compose.override.yml", "docker-compose.override.yaml"}

// checkComposeHeapEnv: a compose dedup process says GOMEMLIMIT and GOGC
// in docker-compose.yml itself: not by env_file, nor with no value or a
// ${…} (the shell's variable of whoever runs docker compose up).
func checkComposeHeapEnv(t *testing.T, name string, env map[string]*string, envFile any) {
	t.Helper()
	if envFile != nil {
		t.Errorf("%s: env_file %v: a dedup process's environment is said in docker-compose.yml, where the GOMEMLIMIT and GOGC checks read it", name, envFile)
	}
	for _, v := range []string{"GOMEMLIMIT", "GOGC"} {
		val, set := env[v]
		if set && (val == nil || strings.Contains(*val, "$")) {
			t.Errorf("%s: %s is taken from the shell that runs docker compose (no value, or ${…}): say it", name, v)
		}
	}
}

// checkNoComposeFilesBesides: docker compose reads only docker-compose.yml.
func checkNoComposeFilesBesides(t *testing.T) {
	t.Helper()
	for _, f := range composeFilesBesides {
		if _, err := os.Stat(filepath.Join("..", f)); err == nil {
			t.Errorf("%s beside docker-compose.yml: docker compose merges or prefers it, and TestCompose reads docker-compose.yml only", f)
		}
	}
}

// checkImageEnvLeavesHeapToManifests: the image sets neither GOGC nor
// GOMEMLIMIT (each process's manifest does): an image's ENV is the
// default of every container that sets none.
func checkImageEnvLeavesHeapToManifests(t *testing.T, dockerfile string) {
	t.Helper()
	for _, line := range strings.Split(strings.ReplaceAll(dockerfile, "\\\n", " "), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || !strings.EqualFold(f[0], "ENV") {
			continue
		}
		for j, w := range f[1:] {
			k, _, _ := strings.Cut(w, "=")
			if (k == "GOGC" || k == "GOMEMLIMIT") && (strings.Contains(w, "=") || j == 0) {
				t.Errorf("Dockerfile: %s: the image sets %s for every process that sets none; each manifest says its own", strings.Join(f, " "), k)
			}
		}
	}
}

// Adversary 55a's tests mutate a copy of the shipped tree the way an
// overlay, a component, a compose file or the Dockerfile can, render it,
// and run the shipped TestKustomize, TestCompose or TestDockerfile on the
// copy: a mutation those tests accept is a gap.

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
