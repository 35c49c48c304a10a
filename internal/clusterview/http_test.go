package clusterview

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/netsy-io/netsy/proto/netsyv1"
)

func serve(t *testing.T, h http.Handler, method, target string) (int, map[string]any, http.Header) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, target, nil))
	var body map[string]any
	if method != http.MethodHead {
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Fatalf("%s %s: body is not a JSON object: %v\n%s", method, target, err, rec.Body)
		}
	}
	return rec.Code, body, rec.Header()
}

func fixed(cs *netsyv1.ClusterState, self *netsyv1.NodeState, err error) StateFunc {
	return func(context.Context) (*netsyv1.ClusterState, *netsyv1.NodeState, error) { return cs, self, err }
}

func TestStateHandler(t *testing.T) {
	cs, self := fixture()
	h := StateHandler(fixed(cs, self, nil))

	code, body, hdr := serve(t, h, http.MethodGet, "/cluster/state")
	if code != http.StatusOK || hdr.Get("Content-Type") != "application/json" {
		t.Fatalf("GET: %d %q", code, hdr.Get("Content-Type"))
	}
	if _, ok := body["events"]; ok {
		t.Errorf("events without ?events=1: %v", body["events"])
	}
	if body["cluster_id"] != "c-7f3a" || len(body["nodes"].([]any)) != 6 {
		t.Errorf("body: %v", body)
	}

	for _, q := range []string{"1", "true"} {
		code, body, _ = serve(t, h, http.MethodGet, "/cluster/state?events="+q)
		if ev, _ := body["events"].([]any); code != http.StatusOK || len(ev) != 3 {
			t.Errorf("?events=%s: %d, events %v", q, code, body["events"])
		}
	}
	code, body, _ = serve(t, h, http.MethodGet, "/cluster/state?events=yes%20please")
	if code != http.StatusBadRequest || !strings.Contains(body["error"].(string), "events") {
		t.Errorf("?events=bogus: %d %v", code, body)
	}

	code, body, _ = serve(t, StateHandler(fixed(nil, nil, errors.New("node is starting"))), http.MethodGet, "/cluster/state")
	if code != http.StatusServiceUnavailable || body["error"] != "node is starting" {
		t.Errorf("failing get: %d %v", code, body)
	}
	code, body, _ = serve(t, StateHandler(fixed(nil, nil, nil)), http.MethodGet, "/cluster/state")
	if code != http.StatusServiceUnavailable || body["error"] != "no cluster state known yet" {
		t.Errorf("nothing known: %d %v", code, body)
	}
	// A node that was never told the roles still shows itself.
	code, body, _ = serve(t, StateHandler(fixed(nil, &netsyv1.NodeState{Info: info("n9", 9),
		State: &netsyv1.Heartbeat{Health: netsyv1.HealthState_LOADING}}, nil)), http.MethodGet, "/cluster/state")
	if nodes, _ := body["nodes"].([]any); code != http.StatusOK || len(nodes) != 1 || nodes[0].(map[string]any)["health"] != "Loading" {
		t.Errorf("loading node: %d %v", code, body)
	}

	code, _, hdr = serve(t, h, http.MethodPost, "/cluster/state")
	if code != http.StatusMethodNotAllowed || hdr.Get("Allow") != "GET, HEAD" {
		t.Errorf("POST: %d, Allow %q", code, hdr.Get("Allow"))
	}
	if code, _, _ = serve(t, h, http.MethodHead, "/cluster/state"); code != http.StatusOK {
		t.Errorf("HEAD: %d", code)
	}
}

func TestLeaderHandler(t *testing.T) {
	cs, self := fixture()
	code, body, _ := serve(t, LeaderHandler(fixed(cs, self, nil)), http.MethodGet, "/cluster/leader")
	if code != http.StatusOK {
		t.Fatalf("GET: %d %v", code, body)
	}
	if len(body) != 4 {
		t.Errorf("fields %v, want primary, primary_term, elector, elector_term", body)
	}
	p, e := body["primary"].(map[string]any), body["elector"].(map[string]any)
	if p["node_id"] != "n2" || p["member_id"] != "2a" || p["peer_addr"] != "10.0.0.2:2380" || body["primary_term"] != 7.0 ||
		e["node_id"] != "n1" || e["member_id"] != "8e9e05c52164694d" || body["elector_term"] != 3.0 {
		t.Errorf("body: %v", body)
	}

	// The node's own view serves when there is no fresher Cluster State.
	code, body, _ = serve(t, LeaderHandler(fixed(nil, &netsyv1.NodeState{ClusterState: cs}, nil)), http.MethodGet, "/cluster/leader")
	if code != http.StatusOK || body["primary"].(map[string]any)["node_id"] != "n2" {
		t.Errorf("self's view: %d %v", code, body)
	}

	noPrimary := &netsyv1.ClusterState{ClusterId: "c", Elector: info("n1", 1), ElectorTerm: 3}
	code, body, _ = serve(t, LeaderHandler(fixed(noPrimary, nil, nil)), http.MethodGet, "/cluster/leader")
	if code != http.StatusServiceUnavailable || body["error"] != "no primary elected" || len(body) != 1 {
		t.Errorf("no primary: %d %v", code, body)
	}
	code, body, _ = serve(t, LeaderHandler(fixed(nil, nil, nil)), http.MethodGet, "/cluster/leader")
	if code != http.StatusServiceUnavailable || body["error"] != "no primary elected" {
		t.Errorf("nothing known: %d %v", code, body)
	}
	code, body, _ = serve(t, LeaderHandler(fixed(cs, nil, errors.New("stopping"))), http.MethodGet, "/cluster/leader")
	if code != http.StatusServiceUnavailable || body["error"] != "stopping" {
		t.Errorf("failing get: %d %v", code, body)
	}
	if code, _, _ = serve(t, LeaderHandler(fixed(cs, nil, nil)), http.MethodDelete, "/cluster/leader"); code != http.StatusMethodNotAllowed {
		t.Errorf("DELETE: %d", code)
	}
}
