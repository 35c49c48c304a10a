package clusterview

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/netsy-io/netsy/proto/netsyv1"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

// t0 is 2026-03-01T10:00:00Z in Unix nanoseconds.
var t0 = time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC).UnixNano()

func info(id string, member uint64) *netsyv1.NodeInfo {
	return &netsyv1.NodeInfo{
		NodeId:     id,
		MemberId:   member,
		PeerAddr:   "10.0.0." + id[1:] + ":2380",
		ClientUrls: []string{"http://10.0.0." + id[1:] + ":2379"},
		HttpAddr:   "10.0.0." + id[1:] + ":2381",
	}
}

func hb(id string, st netsyv1.PrimaryState, latest, committed int64) *netsyv1.Heartbeat {
	return &netsyv1.Heartbeat{NodeId: id, Health: netsyv1.HealthState_HEALTHY, PrimaryState: st,
		LatestRevision: latest, CommittedRevision: committed, PrimaryTerm: 7, PrimaryId: "n2"}
}

// primaryHB is n2's heartbeat as the Active Primary: majority quorum of
// six (two replica receipts), n1 and n6 counted, n3 not (Degraded).
func primaryHB() *netsyv1.Heartbeat {
	h := hb("n2", netsyv1.PrimaryState_ACTIVE, 120, 118)
	h.Replication = &netsyv1.Replication{
		Quorum: -1, ReplicasNeeded: 3, Fallbacks: 2,
		Replicas: []*netsyv1.ReplicaStatus{
			{NodeId: "n1", DurableIndex: 130, LagEntries: 0, Counted: true},
			{NodeId: "n3", DurableIndex: 95, LagEntries: 35, LagMs: 2600, NotCountedReason: "it says it is Degraded"},
			{NodeId: "n6", DurableIndex: 129, LagEntries: 1, LagMs: 3, Counted: true},
		},
	}
	return h
}

// fixture is a cluster as the Elector n1 answers GetClusterState{full}:
// n2 is the Primary, n3 has been Degraded for 2.5s, n4 registered and no
// heartbeat arrived since n1 took over, n5 is a member the Elector has no
// record of, and n6 is ahead of the Primary's last heartbeat.
func fixture() (*netsyv1.ClusterState, *netsyv1.NodeState) {
	cs := &netsyv1.ClusterState{
		ClusterId:       "c-7f3a",
		Elector:         info("n1", 0x8e9e05c52164694d),
		ElectorTerm:     3,
		Primary:         info("n2", 0x2a),
		PrimaryTerm:     7,
		RegisteredNodes: 6,
		Version:         12,
		Nodes: []*netsyv1.NodeStatus{
			// Out of order on purpose: rows are sorted by node id.
			{Info: info("n3", 0x3), Health: netsyv1.HealthState_DEGRADED, Last: hb("n3", netsyv1.PrimaryState_REPLICA, 90, 90),
				LastHeartbeatAgeMs: 3250, DegradedForMs: 2500},
			{Info: info("n2", 0x2a), Health: netsyv1.HealthState_HEALTHY, Last: primaryHB(), LastHeartbeatAgeMs: 120},
			{Info: info("n1", 0x8e9e05c52164694d), Health: netsyv1.HealthState_HEALTHY, Last: hb("n1", netsyv1.PrimaryState_REPLICA, 100, 100),
				LastHeartbeatAgeMs: 0},
			{Info: info("n4", 0x4), Health: netsyv1.HealthState_LOADING, LastHeartbeatAgeMs: -1},
			{Info: info("n6", 0x6), Health: netsyv1.HealthState_HEALTHY, Last: hb("n6", netsyv1.PrimaryState_REPLICA, 121, 118),
				LastHeartbeatAgeMs: 61_500},
		},
		Members: []*netsyv1.NodeInfo{info("n1", 0x8e9e05c52164694d), info("n5", 0x5)},
		Events: []*netsyv1.Event{
			{TimeUnixNano: t0 + int64(2*time.Second), Kind: "primary_elected", NodeId: "n2", ElectorTerm: 3, PrimaryTerm: 7, Revision: 100, Detail: "highest revision", Reporter: "n1"},
			{TimeUnixNano: t0, Kind: "elector_acquired", NodeId: "n1", ElectorTerm: 3, PrimaryTerm: 6, Reporter: "n1"},
		},
	}
	self := &netsyv1.NodeState{
		Info:  info("n1", 0x8e9e05c52164694d),
		State: hb("n1", netsyv1.PrimaryState_REPLICA, 101, 101),
		Events: []*netsyv1.Event{
			// The same event the Elector logged, and one only n1 knows.
			{TimeUnixNano: t0, Kind: "elector_acquired", NodeId: "n1", ElectorTerm: 3, PrimaryTerm: 6, Reporter: "n1"},
			{TimeUnixNano: t0 + int64(1500*time.Millisecond), Kind: "node_degraded", NodeId: "n3", ElectorTerm: 3, PrimaryTerm: 6, Revision: 90, Detail: "2 heartbeats missed", Reporter: "n1"},
		},
	}
	return cs, self
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file:\n--- got\n%s--- want\n%s", name, got, want)
	}
}

func TestWriteTableGolden(t *testing.T) {
	cs, self := fixture()
	v := FromProto(cs, self)
	for _, tc := range []struct {
		name   string
		events bool
	}{
		{"cluster-state.golden", false},
		{"cluster-state-events.golden", true},
	} {
		var b bytes.Buffer
		if err := WriteTable(&b, v, tc.events); err != nil {
			t.Fatal(err)
		}
		golden(t, tc.name, b.Bytes())
	}

	// A node's own view when the Elector did not answer: no Elector
	// records, the node itself, the members it was told about.
	fb := FromProto(nil, &netsyv1.NodeState{
		Info:  info("n3", 0x3),
		State: &netsyv1.Heartbeat{NodeId: "n3", Health: netsyv1.HealthState_DEGRADED, PrimaryState: netsyv1.PrimaryState_REPLICA, LatestRevision: 90, CommittedRevision: 88},
		ClusterState: &netsyv1.ClusterState{ClusterId: "c-7f3a", Elector: info("n1", 0x8e9e05c52164694d), ElectorTerm: 3,
			Primary: info("n2", 0x2a), PrimaryTerm: 7, RegisteredNodes: 3,
			Members: []*netsyv1.NodeInfo{info("n1", 0x8e9e05c52164694d), info("n2", 0x2a), info("n3", 0x3)}},
	})
	fb.Note = "the Elector did not answer: showing n3's view"
	var b bytes.Buffer
	if err := WriteTable(&b, fb, true); err != nil {
		t.Fatal(err)
	}
	golden(t, "cluster-state-fallback.golden", b.Bytes())

	// Nothing known at all still prints every heading.
	b.Reset()
	if err := WriteTable(&b, FromProto(nil, nil), true); err != nil {
		t.Fatal(err)
	}
	golden(t, "cluster-state-empty.golden", b.Bytes())
}

func TestFromProtoRowsLagAndAge(t *testing.T) {
	cs, self := fixture()
	v := FromProto(cs, self)
	type row struct {
		id, source, health, state string
		elector, primary          bool
		lag                       int64 // -1: unknown
		age                       int64 // -1: none
		heartbeat, degradedFor    string
	}
	want := []row{
		{"n1", SourceElector, "Healthy", "Replica", true, false, 20, 0, "0ms", ""},
		{"n2", SourceElector, "Healthy", "Active", false, true, 0, 120, "120ms", ""},
		{"n3", SourceElector, "Degraded", "Replica", false, false, 30, 3250, "3.2s", "2.5s"},
		{"n4", SourceElector, "Loading", "Unknown", false, false, -1, -1, "never", ""},
		{"n5", SourceMember, "Unknown", "Unknown", false, false, -1, -1, "", ""},
		// Ahead of the Primary's last heartbeat: no negative lag.
		{"n6", SourceElector, "Healthy", "Replica", false, false, 0, 61_500, "1m01s", ""},
	}
	if len(v.Nodes) != len(want) {
		t.Fatalf("%d rows, want %d: %+v", len(v.Nodes), len(want), v.Nodes)
	}
	for i, w := range want {
		r := v.Nodes[i]
		lag, age := int64(-1), int64(-1)
		if r.Lag != nil {
			lag = *r.Lag
		}
		if r.LastHeartbeatAgeMS != nil {
			age = *r.LastHeartbeatAgeMS
		}
		got := row{r.NodeID, r.Source, r.Health, r.PrimaryState, r.Elector, r.Primary, lag, age, r.LastHeartbeat, r.DegradedFor}
		if got != w {
			t.Errorf("row %d = %+v\n        want %+v", i, got, w)
		}
	}
	// n1 is listed by the Elector, so its own (newer) heartbeat does not
	// replace the Elector's record: one source per row.
	if v.Nodes[0].LatestRevision != 100 {
		t.Errorf("n1 latest revision %d, want the Elector's 100", v.Nodes[0].LatestRevision)
	}
	if v.ViaNode != "n1" || v.Elector.MemberID != "8e9e05c52164694d" || v.Primary.NodeID != "n2" {
		t.Errorf("header: via %q, elector %+v, primary %+v", v.ViaNode, v.Elector, v.Primary)
	}

	// No Primary elected: nobody has a lag.
	cs.Primary, cs.PrimaryTerm = nil, 0
	for _, r := range FromProto(cs, self).Nodes {
		if r.Lag != nil || r.Primary {
			t.Errorf("no Primary, yet %s has lag %v, primary %v", r.NodeID, r.Lag, r.Primary)
		}
	}
}

func TestEventsMergedOldestFirst(t *testing.T) {
	cs, self := fixture()
	v := FromProto(cs, self)
	var kinds []string
	for _, e := range v.Events {
		kinds = append(kinds, e.Kind+"@"+e.Time)
	}
	want := []string{
		"elector_acquired@2026-03-01T10:00:00.000Z",
		"node_degraded@2026-03-01T10:00:01.500Z",
		"primary_elected@2026-03-01T10:00:02.000Z",
	}
	if len(kinds) != len(want) {
		t.Fatalf("events %v, want %v", kinds, want)
	}
	for i := range want {
		if kinds[i] != want[i] {
			t.Fatalf("events %v, want %v", kinds, want)
		}
	}
}

func TestFormatAge(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{0, "0ms"},
		{120 * time.Millisecond, "120ms"},
		{999 * time.Millisecond, "999ms"},
		{time.Second, "1.0s"},
		{3250 * time.Millisecond, "3.2s"},
		{59_999 * time.Millisecond, "59.9s"},
		{time.Minute, "1m00s"},
		{4*time.Minute + 5*time.Second + 900*time.Millisecond, "4m05s"},
		{2*time.Hour + 3*time.Minute + 59*time.Second, "2h03m"},
		{-1500 * time.Millisecond, "-1.5s"},
	} {
		if got := FormatAge(tc.d); got != tc.want {
			t.Errorf("FormatAge(%v) = %q, want %q", tc.d, got, tc.want)
		}
	}
}

// TestJSONShape pins the field names scripts read.
func TestJSONShape(t *testing.T) {
	cs, self := fixture()
	b, err := json.Marshal(FromProto(cs, self))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"cluster_id", "via_node", "elector", "elector_term", "primary", "primary_term", "registered_nodes", "version", "nodes", "events"} {
		if _, ok := m[k]; !ok {
			t.Errorf("no %q in %s", k, b)
		}
	}
	if _, ok := m["note"]; ok {
		t.Errorf("empty note present: %s", b)
	}
	if m["cluster_id"] != "c-7f3a" || m["elector_term"] != 3.0 || m["primary_term"] != 7.0 || m["registered_nodes"] != 6.0 {
		t.Errorf("header values: %s", b)
	}
	primary := m["primary"].(map[string]any)
	if primary["node_id"] != "n2" || primary["member_id"] != "2a" || primary["peer_addr"] != "10.0.0.2:2380" || primary["http_addr"] != "10.0.0.2:2381" {
		t.Errorf("primary: %v", primary)
	}
	nodes := m["nodes"].([]any)
	n3 := nodes[2].(map[string]any)
	wantN3 := map[string]any{
		"node_id": "n3", "member_id": "3", "peer_addr": "10.0.0.3:2380", "elector": false, "primary": false,
		"source": "elector", "health": "Degraded", "primary_state": "Replica", "latest_revision": 90.0,
		"committed_revision": 90.0, "lag": 30.0, "last_heartbeat_age_ms": 3250.0, "last_heartbeat": "3.2s",
		"degraded_for_ms": 2500.0, "degraded_for": "2.5s", "seen_primary_id": "n2", "seen_primary_term": 7.0,
	}
	for k, want := range wantN3 {
		if got := n3[k]; got != want {
			t.Errorf("nodes[2].%s = %v (%T), want %v", k, got, got, want)
		}
	}
	if urls := n3["client_urls"].([]any); len(urls) != 1 || urls[0] != "http://10.0.0.3:2379" {
		t.Errorf("nodes[2].client_urls = %v", urls)
	}
	// Unknown values are null, not a misleading zero.
	n4 := nodes[3].(map[string]any)
	if n4["lag"] != nil || n4["last_heartbeat_age_ms"] != nil || n4["last_heartbeat"] != "never" {
		t.Errorf("n4 (never heard from): lag %v, age %v, last_heartbeat %v", n4["lag"], n4["last_heartbeat_age_ms"], n4["last_heartbeat"])
	}
	ev := m["events"].([]any)[2].(map[string]any)
	wantEv := map[string]any{"time": "2026-03-01T10:00:02.000Z", "kind": "primary_elected", "node": "n2", "elector_term": 3.0,
		"primary_term": 7.0, "revision": 100.0, "detail": "highest revision", "reporter": "n1"}
	for k, want := range wantEv {
		if got := ev[k]; got != want {
			t.Errorf("events[2].%s = %v, want %v", k, got, want)
		}
	}

	// No Primary, no Elector: null, so `jq .primary` tells "none" apart.
	b, _ = json.Marshal(FromProto(&netsyv1.ClusterState{ClusterId: "c"}, nil))
	m = nil
	json.Unmarshal(b, &m)
	if v, ok := m["primary"]; !ok || v != nil {
		t.Errorf("primary with none elected: %s", b)
	}
	if v, ok := m["nodes"].([]any); !ok || len(v) != 0 {
		t.Errorf("nodes with none known should be []: %s", b)
	}
}

// A node the Elector keeps counting past the deregistration timeout says
// why, in the JSON row and under the table.
func TestDeregistrationWaitShown(t *testing.T) {
	cs, self := fixture()
	const why = "its last reported index 40 is above the bucket's durable tip 12"
	for _, ns := range cs.Nodes {
		if ns.GetInfo().GetNodeId() == "n3" {
			ns.DeregistrationWait = why
		}
	}
	v := FromProto(cs, self)
	for _, r := range v.Nodes {
		if got, want := r.DeregistrationWait, map[bool]string{true: why}[r.NodeID == "n3"]; got != want {
			t.Fatalf("row %s: DeregistrationWait %q, want %q", r.NodeID, got, want)
		}
	}
	var b strings.Builder
	if err := WriteTable(&b, v, false); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "n3 stays counted past the deregistration timeout: "+why) {
		t.Fatalf("the table does not say why n3 stays counted:\n%s", b.String())
	}
}

// The Primary's report of the oldest restorable point reaches the JSON and
// the table; nothing is shown while it reports none.
func TestRestoreWindowShown(t *testing.T) {
	cs, self := fixture()
	var b bytes.Buffer
	if err := WriteTable(&b, FromProto(cs, self), false); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "Restorable from") {
		t.Fatalf("a restore line while the Primary reported none:\n%s", b.String())
	}
	for _, ns := range cs.Nodes {
		if ns.GetInfo().GetNodeId() == "n2" {
			ns.Last.RestoreOldestRevision = 4200
			ns.Last.RestoreOldestTimeMs = t0/int64(time.Millisecond) - 86_400_000
		}
	}
	v := FromProto(cs, self)
	if v.Restore == nil || v.Restore.OldestRevision != 4200 || v.Restore.OldestTime != "2026-02-28T10:00:00.000Z" {
		t.Fatalf("Restore = %+v, want revision 4200 at 2026-02-28T10:00:00.000Z", v.Restore)
	}
	j, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(j), `"restore":{"oldest_revision":4200,"oldest_time":"2026-02-28T10:00:00.000Z"}`) {
		t.Fatalf("JSON lacks the restore window: %s", j)
	}
	b.Reset()
	if err := WriteTable(&b, v, false); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "Restorable from:") || !strings.Contains(b.String(), "revision 4200 (2026-02-28T10:00:00.000Z)") {
		t.Fatalf("table lacks the restore line:\n%s", b.String())
	}
}
