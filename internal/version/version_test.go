package version

import (
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/netsy-io/netsy/internal/engine"
)

func TestGet(t *testing.T) {
	i := Get()
	if i.Netsy != Version || i.EtcdAPI != engine.Version || i.Go != runtime.Version() || i.Commit == "" {
		t.Fatalf("Get() = %+v", i)
	}
	s := i.String()
	for _, want := range []string{"netsy version: " + Version, "etcd API version: " + engine.Version, "git commit: " + i.Commit, "go version: " + runtime.Version()} {
		if !strings.Contains(s, want) {
			t.Errorf("String() lacks %q:\n%s", want, s)
		}
	}
}

func TestResolveCommit(t *testing.T) {
	stamp := func(settings ...debug.BuildSetting) func() (*debug.BuildInfo, bool) {
		return func() (*debug.BuildInfo, bool) { return &debug.BuildInfo{Settings: settings}, true }
	}
	none := func() (*debug.BuildInfo, bool) { return nil, false }
	rev := debug.BuildSetting{Key: "vcs.revision", Value: "abc123"}
	cases := []struct {
		name   string
		linked string
		read   func() (*debug.BuildInfo, bool)
		want   string
	}{
		{"linker wins", "fromldflags", stamp(rev), "fromldflags"},
		{"vcs stamp", "", stamp(rev, debug.BuildSetting{Key: "vcs.modified", Value: "false"}), "abc123"},
		{"dirty tree", "", stamp(rev, debug.BuildSetting{Key: "vcs.modified", Value: "true"}), "abc123-dirty"},
		{"no stamp", "", stamp(), "unknown"},
		{"no build info", "", none, "unknown"},
	}
	for _, tc := range cases {
		if got := resolveCommit(tc.linked, tc.read); got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
}
