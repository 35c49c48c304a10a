package version

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/netsy-io/netsy/internal/engine"
)

// Version is Netsy's own version. There has been no release yet.
const Version = "0.0.0-dev"

// commit is set by the linker: go build -ldflags "-X
// github.com/netsy-io/netsy/internal/version.commit=$(git rev-parse HEAD)".
var commit string

// Info describes the running build.
type Info struct {
	// Netsy is Netsy's own version.
	Netsy string `json:"netsy"`
	// EtcdAPI is the etcd server version Netsy reports to clients
	// (Status, and what kube-apiserver reads to pick its features).
	EtcdAPI string `json:"etcd_api"`
	// Commit is the git commit of the build, "unknown" if not recorded;
	// a "-dirty" suffix means the tree had uncommitted changes.
	Commit string `json:"commit"`
	// Go is the Go toolchain that built the binary.
	Go string `json:"go"`
}

// Get returns the running build's Info.
func Get() Info {
	return Info{Netsy: Version, EtcdAPI: engine.Version, Commit: resolveCommit(commit, debug.ReadBuildInfo), Go: runtime.Version()}
}

// resolveCommit prefers the linker's value, then the VCS stamp of the
// build info.
func resolveCommit(linked string, read func() (*debug.BuildInfo, bool)) string {
	if linked != "" {
		return linked
	}
	bi, ok := read()
	if !ok {
		return "unknown"
	}
	var rev string
	dirty := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "unknown"
	}
	if dirty {
		rev += "-dirty"
	}
	return rev
}

// String renders Info the way both commands print it.
func (i Info) String() string {
	return fmt.Sprintf("netsy version: %s\netcd API version: %s\ngit commit: %s\ngo version: %s\n", i.Netsy, i.EtcdAPI, i.Commit, i.Go)
}
