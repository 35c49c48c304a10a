//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/netsy-io/netsy/internal/testutil/procutil"
)

// TestGateway runs the curl examples of etcd's JSON gateway documentation
// (put, range, range prefix, watch streaming a put, txn, lease grant,
// keepalive and timetolive, status, deleterange) with the real curl against
// the client port of a node, of a replica of a 3-node cluster, and of a
// node with TLS and --client-cert-auth; and the same assertions against
// etcd (NETSY_E2E_TARGET=etcd: a node, plaintext and TLS).
func TestGateway(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("no curl")
	}
	t.Run("node", func(t *testing.T) {
		s := procutil.Start(t, target, procutil.Options{})
		gatewayExamples(t, s.Endpoint)
	})
	t.Run("replica", func(t *testing.T) {
		skipUnlessNetsy(t)
		gatewayExamples(t, startReplica(t).Endpoint)
	})
	t.Run("tls", func(t *testing.T) {
		p := makePKI(t)
		tlsArgs := []string{"--cert-file", p.path("n1.crt"), "--key-file", p.path("n1.key"),
			"--trusted-ca-file", p.path("ca.crt"), "--client-cert-auth"}
		var base string
		if target == procutil.KindNetsy {
			s := procutil.StartNetsy(t, procutil.Options{Args: append([]string{"--cluster-id", "netsy"}, tlsArgs...)})
			base = "https://" + s.ClientAddr
		} else {
			// etcd serves TLS on a second client URL; the harness probes
			// the plaintext one.
			plain, secure := procutil.FreeAddr(t), procutil.FreeAddr(t)
			procutil.StartEtcd(t, procutil.Options{ClientAddr: plain, Args: append([]string{
				"--listen-client-urls", "http://" + plain + ",https://" + secure,
				"--advertise-client-urls", "https://" + secure,
			}, tlsArgs...)})
			base = "https://" + secure
		}
		gatewayExamples(t, base, "--cacert", p.path("ca.crt"), "--cert", p.path("app.crt"), "--key", p.path("app.key"))
		// Without a client certificate, or with another CA's, curl gets
		// nothing: the handshake fails.
		for _, args := range [][]string{
			{"--cacert", p.path("ca.crt")},
			{"--cacert", p.path("ca.crt"), "--cert", p.path("stranger.crt"), "--key", p.path("stranger.key")},
		} {
			out, err := curlCmd(t, base+"/v3/kv/range", `{"key":"Zm9v"}`, args...).CombinedOutput()
			if err == nil {
				t.Fatalf("curl %q got an answer: %s", args, out)
			}
		}
	})
}

func curlCmd(t *testing.T, url, body string, args ...string) *exec.Cmd {
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	t.Cleanup(cancel)
	return exec.CommandContext(ctx, "curl", append([]string{"-sS", "-L", url, "-X", "POST", "-d", body}, args...)...)
}

// curlJSON posts body to base+path and returns the answer, failing the test
// unless curl succeeds.
func curlJSON(t *testing.T, base, path, body string, args ...string) string {
	t.Helper()
	out, err := curlCmd(t, base+path, body, args...).Output()
	if err != nil {
		t.Fatalf("curl %s %s: %v %s", path, body, err, out)
	}
	return strings.TrimSpace(string(out))
}

// has fails the test unless got contains every want: etcd's exact
// spelling (proto names, int64 as strings, base64 bytes, no spaces).
func has(t *testing.T, what, got string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Fatalf("%s: %s\nlacks %s", what, got, w)
		}
	}
}

var revRE = regexp.MustCompile(`"revision":"(\d+)"`)

func gatewayExamples(t *testing.T, base string, tlsArgs ...string) {
	t.Helper()
	post := func(path, body string) string { t.Helper(); return curlJSON(t, base, path, body, tlsArgs...) }

	// foo is Zm9v, bar YmFy, baz YmF6, fop Zm9w.
	put := post("/v3/kv/put", `{"key": "Zm9v", "value": "YmFy"}`)
	m := revRE.FindStringSubmatch(put)
	if m == nil {
		t.Fatalf("put: %s has no header revision", put)
	}
	rev := m[1]
	has(t, "put", put, `{"header":{"cluster_id":"`, `"member_id":"`, `"raft_term":"`)
	has(t, "range", post("/v3/kv/range", `{"key": "Zm9v"}`),
		`"kvs":[{"key":"Zm9v","create_revision":"`+rev+`","mod_revision":"`+rev+`","version":"1","value":"YmFy"}],"count":"1"}`)
	post("/v3/kv/put", `{"key": "Zm9vMg==", "value": "YmF6"}`) // foo2
	has(t, "range prefix", post("/v3/kv/range", `{"key": "Zm9v", "range_end": "Zm9w"}`),
		`"key":"Zm9v"`, `"key":"Zm9vMg=="`, `"count":"2"}`)

	// Watch: curl streams the results; a put arrives as an event.
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	watch := exec.CommandContext(ctx, "curl", append([]string{"-sS", "-N", base + "/v3/watch", "-X", "POST",
		"-d", `{"create_request": {"key":"Zm9v"} }`}, tlsArgs...)...)
	stdout, err := watch.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = watch.Wait() }()
	lines := bufio.NewScanner(stdout)
	next := func() string {
		t.Helper()
		if !lines.Scan() {
			t.Fatalf("watch stream ended: %v", lines.Err())
		}
		return lines.Text()
	}
	has(t, "watch created", next(), `{"result":{"header":{`, `"created":true}}`)
	post("/v3/kv/put", `{"key": "Zm9v", "value": "YmF6"}`)
	has(t, "watch event", next(), `"events":[{"kv":{"key":"Zm9v","create_revision":"`+rev+`"`, `"version":"2","value":"YmF6"}}]}}`)

	// Txn, as etcd's docs write it (camelCase names are accepted too).
	has(t, "txn", post("/v3/kv/txn",
		`{"compare":[{"target":"CREATE","key":"Zm9v","createRevision":"`+rev+`"}],"success":[{"requestPut":{"key":"Zm9v","value":"YmFy"}}]}`),
		`"succeeded":true,"responses":[{"response_put":{"header":{"revision":"`)

	grant := post("/v3/lease/grant", `{"TTL": 30}`)
	var lease struct{ ID, TTL string }
	if err := json.Unmarshal([]byte(grant), &lease); err != nil || lease.ID == "" || lease.TTL != "30" {
		t.Fatalf("lease grant: %s (%v)", grant, err)
	}
	has(t, "lease keepalive", post("/v3/lease/keepalive", `{"ID": `+lease.ID+`}`), `"ID":"`+lease.ID+`","TTL":"30"}}`)
	has(t, "lease timetolive", post("/v3/lease/timetolive", `{"ID": `+lease.ID+`}`), `"ID":"`+lease.ID+`","TTL":"`, `"grantedTTL":"30"}`)
	has(t, "lease leases", post("/v3/lease/leases", `{}`), `"leases":[{"ID":"`+lease.ID+`"}`)
	has(t, "lease revoke", post("/v3/lease/revoke", `{"ID": `+lease.ID+`}`), `{"header":{"cluster_id":"`)

	has(t, "status", post("/v3/maintenance/status", `{}`), `"version":"3.6.10"`, `"dbSize":"`, `"leader":"`)
	has(t, "deleterange", post("/v3/kv/deleterange", `{"key": "Zm9v", "range_end": "Zm9w"}`), `"deleted":"2"}`)

	// Bad input: etcd's status and body.
	for _, c := range []struct{ body, want string }{
		{`{"key": "Zm9v",`, `{"code":3,"message":"unexpected EOF"}`},
		{`{"key": "!!!"}`, `{"code":3,"message":"proto: (line 1:9): invalid value for bytes field key: \"!!!\""}`},
	} {
		out, err := curlCmd(t, base+"/v3/kv/range", c.body, append([]string{"-w", " %{http_code}"}, tlsArgs...)...).Output()
		if got := strings.TrimSpace(string(out)); err != nil || got != c.want+" 400" {
			t.Errorf("range %s: %q %v, want %q", c.body, got, err, c.want+" 400")
		}
	}
	// etcd 3.6 ignores a field it does not know.
	has(t, "unknown field", post("/v3/kv/range", `{"key": "Zm9v", "no_such_field": 1}`), `{"header":{"cluster_id":"`)
}
