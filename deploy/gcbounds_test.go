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
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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
