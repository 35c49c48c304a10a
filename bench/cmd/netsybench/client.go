package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
)

// newClient returns an etcd client that redials quickly: the restart
// measurement must not be dominated by gRPC's default one-second reconnect
// backoff. endpoint may list several, comma-separated; the client spreads
// its requests over them (round robin) as etcd's clients do.
func newClient(endpoint string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints:   strings.Split(endpoint, ","),
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{
			grpc.WithConnectParams(grpc.ConnectParams{
				Backoff: backoff.Config{
					BaseDelay:  5 * time.Millisecond,
					Multiplier: 1.2,
					MaxDelay:   20 * time.Millisecond,
				},
				MinConnectTimeout: time.Second,
			}),
		},
	})
}

// loadKeys writes n keys of valSize random bytes with a few concurrent
// writers.
func loadKeys(ctx context.Context, endpoint string, n, valSize int, key func(int) string) error {
	cli, err := newClient(endpoint)
	if err != nil {
		return err
	}
	defer cli.Close()
	val := make([]byte, valSize)
	_, _ = rand.Read(val)
	const writers = 16
	next := make(chan int)
	errc := make(chan error, writers)
	var wg sync.WaitGroup
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if _, err := cli.Put(ctx, key(i), string(val)); err != nil {
					errc <- fmt.Errorf("load %s: %w", key(i), err)
					return
				}
			}
		}()
	}
	var firstErr error
feed:
	for i := range n {
		select {
		case next <- i:
		case firstErr = <-errc:
			break feed
		case <-ctx.Done():
			firstErr = ctx.Err()
			break feed
		}
	}
	close(next)
	wg.Wait()
	if firstErr == nil {
		select {
		case firstErr = <-errc:
		default:
		}
	}
	return firstErr
}

// getOnce makes one linearizable Get of key on endpoint, with a client
// of its own and a 30 s bound.
func getOnce(ctx context.Context, endpoint, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	cli, err := newClient(endpoint)
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return cli.Get(ctx, key, opts...)
}

// countKeys returns how many keys the server holds.
func countKeys(ctx context.Context, endpoint string) (int64, error) {
	resp, err := getOnce(ctx, endpoint, "\x00", clientv3.WithFromKey(), clientv3.WithCountOnly())
	if err != nil {
		return 0, err
	}
	return resp.Count, nil
}

// waitServing polls a linearizable Get until one succeeds and returns when
// it did.
func waitServing(ctx context.Context, cli *clientv3.Client, timeout time.Duration) (time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		actx, acancel := context.WithTimeout(ctx, 500*time.Millisecond)
		_, err := cli.Get(actx, singleKey)
		acancel()
		if err == nil {
			return time.Now(), nil
		}
		last = err
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("no successful Get within %v: %v", timeout, last)
		case <-time.After(5 * time.Millisecond):
		}
	}
}
