package node

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/netsy-io/netsy/internal/config"
)

// TestEtcdHealthFollowsHealthz checks that /health renders whatever
// /healthz decides in etcd's shape, healthy or not.
func TestEtcdHealthFollowsHealthz(t *testing.T) {
	cases := []struct {
		name     string
		healthz  func(w http.ResponseWriter)
		wantCode int
		wantBody string
	}{
		{"healthy", func(w http.ResponseWriter) { fmt.Fprintln(w, "ok") },
			200, `{"health":"true","reason":""}` + "\n"},
		{"unhealthy", func(w http.ResponseWriter) {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "unhealthy: fsync failed")
		}, 503, `{"health":"false","reason":"unhealthy: fsync failed"}` + "\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			mux := http.NewServeMux()
			mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { tc.healthz(w) })
			addProbes(mux, func() error { return nil })
			for _, p := range []struct {
				path string
				code int
				body string
			}{{"/health", tc.wantCode, tc.wantBody}, {"/livez", 200, "ok\n"}} {
				rec := httptest.NewRecorder()
				mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, p.path, nil))
				if rec.Code != p.code || rec.Body.String() != p.body {
					t.Errorf("GET %s: %d %q, want %d %q", p.path, rec.Code, rec.Body.String(), p.code, p.body)
				}
			}
		})
	}
}

// TestLivezFailsOnlyWhenTheLogFailedForGood: a liveness probe restarts a
// node whose log failed for good, and nothing else.
func TestLivezFailsOnlyWhenTheLogFailedForGood(t *testing.T) {
	var failed error
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, "unhealthy: writes fail: object storage unavailable")
	})
	addProbes(mux, func() error { return failed })
	get := func() (int, string) {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/livez", nil))
		return rec.Code, rec.Body.String()
	}
	if code, body := get(); code != 200 {
		t.Fatalf("/livez while only /healthz fails: %d %q, want 200", code, body)
	}
	failed = errors.New("data directory deleted")
	if code, body := get(); code != 503 || body != "failed: data directory deleted\n" {
		t.Fatalf("/livez after the log failed: %d %q, want 503", code, body)
	}
}

func TestWarnQuorum(t *testing.T) {
	for _, tc := range []struct {
		quorum, others int
		warn           bool
	}{
		{-1, 0, false}, {0, 0, false}, {1, 0, true}, {3, 0, true},
		{1, 2, false}, {2, 2, false}, {3, 2, true}, {-1, 2, false},
	} {
		var logged []string
		log := &capture{Logger: hclog.NewNullLogger(), lines: &logged}
		cfg := config.Default()
		cfg.Quorum = tc.quorum
		warnQuorum(cfg, tc.others, log)
		if (len(logged) > 0) != tc.warn {
			t.Errorf("--quorum %d with %d other nodes: warned %v, want a warning %v", tc.quorum, tc.others, logged, tc.warn)
		}
	}
}

// capture records Warn messages.
type capture struct {
	hclog.Logger
	lines *[]string
}

func (c *capture) Warn(msg string, args ...any) { *c.lines = append(*c.lines, msg) }
