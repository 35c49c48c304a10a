package node

import (
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/config"
)

// A node whose bucket cannot be reached at start-up fails to start with an
// error that names the storage and the endpoint, and does not hang: when
// nothing listens at the endpoint, and when something accepts connections
// but never answers (a frozen server).
func TestUnreachableBucketAtStartUp(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "netsy")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "netsysecret")
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() {
		// Accept and hold every connection, answering nothing.
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	for name, endpoint := range map[string]string{
		"refused": freePeerAddr(t),
		"silent":  silent.Addr().String(),
	} {
		t.Run(name, func(t *testing.T) {
			cfg := config.Default()
			cfg.DataDir = t.TempDir()
			cfg.ClientAddr, cfg.HTTPAddr, cfg.PeerAddr = freePeerAddr(t), freePeerAddr(t), freePeerAddr(t)
			cfg.Storage = "s3://netsy/p"
			cfg.S3Endpoint = "http://" + endpoint
			cfg.S3PathStyle = true
			cfg.S3Region = "us-east-1"
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			start := time.Now()
			n, err := StartWith(ctx, cfg, hclog.New(&hclog.LoggerOptions{Output: io.Discard}), Deps{Clock: clock.Real(), WaitReady: true})
			took := time.Since(start)
			if err == nil {
				n.Close()
				t.Fatal("the node started with its bucket unreachable")
			}
			t.Logf("after %v: %v", took, err)
			for _, want := range []string{"s3://netsy/p", endpoint} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("the error does not name %q: %v", want, err)
				}
			}
			if took > 75*time.Second {
				t.Errorf("start-up took %v to give up", took)
			}
		})
	}
}
