package node

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/netsy-io/netsy/internal/config"
)

// gatewayPost posts body to path on the node's client port with c.
func gatewayPost(ctx context.Context, c *http.Client, url, body string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// The JSON gateway shares the client port with gRPC; with
// --client-cert-auth an HTTP client is held to the same certificate rules
// as a gRPC client, and the request log names the HTTP client's identity
// (the gateway's inner connection is nobody's identity and no way in).
func TestGatewaySharesTheClientPortUnderClientCertAuth(t *testing.T) {
	p := newTestPKI(t)
	var logs syncLog
	n := startNode(t, "", func(c *config.Config) {
		c.NodeID = "n1"
		c.LogLevel = "debug"
		p.secure(c)
	}, &logs)
	n.log.SetLevel(hclog.Debug)
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	url := "https://" + n.ClientAddr() + "/v3/kv/put"

	// curl offers h2 and http/1.1; the gateway answers over HTTP/1.1.
	web := p.clientTLS("web")
	web.NextProtos = []string{"h2", "http/1.1"}
	tr := &http.Transport{TLSClientConfig: web, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	code, body, err := gatewayPost(ctx, &http.Client{Transport: tr}, url, `{"key":"Zm9v","value":"YmFy"}`)
	if err != nil || code != 200 || !strings.Contains(body, `"revision":"`) {
		t.Fatalf("put through the gateway with a client certificate: %d %s %v", code, body, err)
	}
	waitLog(t, &logs, "method=/etcdserverpb.KV/Put", "identity=netsy://netsy/client/web")

	// gRPC on the same port still works.
	if _, err := tlsClient(t, n.ClientAddr(), p.clientTLS("app")).Get(ctx, "foo"); err != nil {
		t.Fatalf("gRPC on the shared port: %v", err)
	}

	noCert := p.clientTLS("x")
	noCert.Certificates = nil
	tr2 := &http.Transport{TLSClientConfig: noCert}
	defer tr2.CloseIdleConnections()
	if code, body, err := gatewayPost(ctx, &http.Client{Transport: tr2}, url, `{"key":"Zm9v","value":"ZXZpbA=="}`); err == nil {
		t.Fatalf("an HTTP client without a certificate got %d %s", code, body)
	}
	waitLog(t, &logs, `identity="no certificate"`, "a certificate is required")
	resp, err := tlsClient(t, n.ClientAddr(), p.clientTLS("app")).Get(ctx, "foo")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "bar" {
		t.Fatalf("after the refused HTTP put: %v %v", resp, err)
	}

	// A plaintext HTTP request on the TLS port gets nothing either.
	if _, _, err := gatewayPost(ctx, http.DefaultClient, "http://"+n.ClientAddr()+"/v3/kv/range", `{"key":"Zm9v"}`); err == nil {
		t.Fatal("a plaintext HTTP request on the TLS client port was answered")
	}
}
