package app

import (
	"runtime"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// setVersion stands in for -ldflags -X for one test.
func setVersion(t *testing.T, version, commit string) {
	t.Helper()
	oldV, oldC := Version, Commit
	Version, Commit = version, commit
	t.Cleanup(func() { Version, Commit = oldV, oldC })
}

// What -ldflags injected is what dedup_build_info and `dedup version` say.
func TestBuildInfoReportsInjectedVersion(t *testing.T) {
	setVersion(t, "v1.2.3", "0123456789abcdef")
	reg := prometheus.NewRegistry()
	reg.MustRegister(newBuildInfo())
	mfs, err := reg.Gather()
	if err != nil || len(mfs) != 1 || len(mfs[0].GetMetric()) != 1 {
		t.Fatalf("gathered %v, %v: want one dedup_build_info series", mfs, err)
	}
	m := mfs[0].GetMetric()[0]
	labels := map[string]string{}
	for _, l := range m.GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	want := map[string]string{"version": "v1.2.3", "revision": "0123456789abcdef", "goversion": runtime.Version()}
	if mfs[0].GetName() != "dedup_build_info" || m.GetGauge().GetValue() != 1 || len(labels) != len(want) {
		t.Errorf("%s = %v %v, want dedup_build_info%v 1", mfs[0].GetName(), labels, m.GetGauge().GetValue(), want)
	}
	for k, v := range want {
		if labels[k] != v {
			t.Errorf("dedup_build_info{%s=%q}, want %q", k, labels[k], v)
		}
	}
	if got, want := VersionLine(), "dedup v1.2.3 (commit 0123456789abcdef, "+runtime.Version()+" "+runtime.GOOS+"/"+runtime.GOARCH+")"; got != want {
		t.Errorf("VersionLine() = %q, want %q", got, want)
	}
}

// Without -ldflags, a test binary has no module version ("(devel)") and
// here no VCS stamp: the fallbacks, never "(devel)" or an empty label.
func TestBuildVersionFallsBack(t *testing.T) {
	setVersion(t, "", "")
	v, c := BuildVersion()
	if v == "" || v == "(devel)" || c == "" {
		t.Errorf("BuildVersion() = %q, %q: want devel (or a module version) and a commit or unknown", v, c)
	}
	setVersion(t, "v2.0.0", "")
	if v, _ := BuildVersion(); v != "v2.0.0" {
		t.Errorf("BuildVersion() = %q with Version injected, want v2.0.0", v)
	}
}
