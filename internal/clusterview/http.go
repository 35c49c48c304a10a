package clusterview

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/netsy-io/netsy/proto/netsyv1"
)

// StateFunc returns the Cluster State a node would answer with and the
// node's own state. Either may be nil (see FromProto); an error means the
// node cannot say anything now (starting, stopping).
type StateFunc func(ctx context.Context) (*netsyv1.ClusterState, *netsyv1.NodeState, error)

// Leader is what /cluster/leader answers.
type Leader struct {
	Primary     *NodeRef `json:"primary"`
	PrimaryTerm uint64   `json:"primary_term"`
	Elector     *NodeRef `json:"elector"`
	ElectorTerm uint64   `json:"elector_term"`
}

// LeaderOf returns the roles of cs (of self's view when cs is nil), and
// false when no Primary is elected.
func LeaderOf(cs *netsyv1.ClusterState, self *netsyv1.NodeState) (Leader, bool) {
	if cs == nil {
		cs = self.GetClusterState()
	}
	l := Leader{
		Primary:     Ref(cs.GetPrimary()),
		PrimaryTerm: cs.GetPrimaryTerm(),
		Elector:     Ref(cs.GetElector()),
		ElectorTerm: cs.GetElectorTerm(),
	}
	return l, l.Primary != nil
}

var errNoState = errors.New("no cluster state known yet")

// StateHandler serves the View of get's answer as JSON (GET /cluster/state).
// The query parameter events=1 (or true) includes the event log. When get
// fails or knows nothing it answers 503 with {"error": "..."}.
func StateHandler(get StateFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !allowRead(w, r) {
			return
		}
		events := false
		if s := r.URL.Query().Get("events"); s != "" {
			var err error
			if events, err = strconv.ParseBool(s); err != nil {
				writeJSON(w, http.StatusBadRequest, errorBody{"events: " + strconv.Quote(s) + " is not 1, 0, true or false"})
				return
			}
		}
		cs, self, err := get(r.Context())
		if err == nil && cs == nil && self == nil {
			err = errNoState
		}
		if err != nil {
			writeJSON(w, http.StatusServiceUnavailable, errorBody{err.Error()})
			return
		}
		v := FromProto(cs, self)
		if !events {
			v.Events = nil
		}
		writeJSON(w, http.StatusOK, v)
	})
}

// LeaderHandler serves the current Primary and Elector with their terms
// as JSON (GET /cluster/leader): 200 when a Primary is elected, 503 with
// {"error": "no primary elected"} when none is, 503 with get's error when
// it fails.
func LeaderHandler(get StateFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !allowRead(w, r) {
			return
		}
		cs, self, err := get(r.Context())
		if err != nil {
			writeJSON(w, http.StatusServiceUnavailable, errorBody{err.Error()})
			return
		}
		l, ok := LeaderOf(cs, self)
		if !ok {
			writeJSON(w, http.StatusServiceUnavailable, errorBody{"no primary elected"})
			return
		}
		writeJSON(w, http.StatusOK, l)
	})
}

type errorBody struct {
	Error string `json:"error"`
}

func allowRead(w http.ResponseWriter, r *http.Request) bool {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return true
	}
	w.Header().Set("Allow", "GET, HEAD")
	writeJSON(w, http.StatusMethodNotAllowed, errorBody{r.Method + " is not allowed: use GET"})
	return false
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		code, b = http.StatusInternalServerError, []byte(`{"error": "encode response"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	w.Write(append(b, '\n'))
}
