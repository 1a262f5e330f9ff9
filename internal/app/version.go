package app

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// Version and Commit name the build. Release builds set them at link time,
//
//	-ldflags "-X github.com/dedupio/dedup/internal/app.Version=v1.2.3 -X github.com/dedupio/dedup/internal/app.Commit=<sha>"
//
// as `make build` (LDFLAGS) and the Dockerfile (build args VERSION and
// COMMIT) do. Left empty, BuildVersion falls back to what the Go toolchain
// recorded. They are the only package-level variables here: the linker can
// set nothing else.
var (
	// Version is the release version (v1.2.3) injected at link time.
	Version string
	// Commit is the VCS revision injected at link time.
	Commit string
)

// BuildVersion is the version and commit this binary reports, in
// `dedup version` and in dedup_build_info: the ones injected with -ldflags;
// else the module version (`go install …/cmd/dedup@v1.2.3`) and the VCS
// revision the toolchain stamped (a build inside a git checkout without
// -buildvcs=false); else "devel" and "unknown".
func BuildVersion() (version, commit string) {
	version, commit = Version, Commit
	if bi, ok := debug.ReadBuildInfo(); ok {
		if version == "" && bi.Main.Version != "(devel)" {
			version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if commit == "" && s.Key == "vcs.revision" {
				commit = s.Value
			}
		}
	}
	if version == "" {
		version = "devel"
	}
	if commit == "" {
		commit = "unknown"
	}
	return version, commit
}

// VersionLine is what `dedup version` prints: one line, the same values as
// dedup_build_info.
func VersionLine() string {
	v, c := BuildVersion()
	return fmt.Sprintf("dedup %s (commit %s, %s %s/%s)", v, c, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// newBuildInfo is dedup_build_info: always 1, its labels say which build
// runs. Every process (router, worker) registers one.
func newBuildInfo() *prometheus.GaugeVec {
	build := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "dedup_build_info", Help: "Always 1; labels say which build runs."},
		[]string{"version", "revision", "goversion"})
	v, c := BuildVersion()
	build.WithLabelValues(v, c, runtime.Version()).Set(1)
	return build
}
