package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// The shape of the watch-notify and watch-latency rows: 10 streams × 10
// watchers of one key on one connection, puts of 256 B at 200/s from a
// second connection.
const (
	notifyStreams   = 10
	notifyPerStream = 10
	notifyRate      = 200
	notifyValSize   = 256
	notifyKey       = "/bench/notify"
)

// runWatchNotify measures what a watching client waits for: from the moment
// a put is sent until each watcher has its event. etcd's watch-latency
// starts the clock at the put's response instead, so of two servers that
// deliver an event at the same moment, the one that answered the put sooner
// shows the larger latency there. Value is puts per second.
func runWatchNotify(ctx context.Context, endpoint string, puts int) (measurement, error) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	// Deferred calls run last first: cancel ends the watches, then their
	// goroutines are waited for.
	defer wg.Wait()
	defer cancel()
	wcli, err := newClient(endpoint)
	if err != nil {
		return measurement{}, err
	}
	defer wcli.Close()
	pcli, err := newClient(endpoint)
	if err != nil {
		return measurement{}, err
	}
	defer pcli.Close()

	// arrivals[w][j] is when watcher w received the event of put j: one
	// key, one event per put, delivered in order.
	arrivals := make([][]time.Time, notifyStreams*notifyPerStream)
	errc := make(chan error, len(arrivals))
	for s := range notifyStreams {
		// Each Watcher opens its own stream over wcli's one connection.
		watcher := clientv3.NewWatcher(wcli)
		defer watcher.Close()
		for k := range notifyPerStream {
			i := s*notifyPerStream + k
			arrivals[i] = make([]time.Time, 0, puts)
			wch := watcher.Watch(ctx, notifyKey, clientv3.WithCreatedNotify())
			if resp, ok := <-wch; !ok || !resp.Created {
				return measurement{}, fmt.Errorf("watch %d not created: %v", i, resp.Err())
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for resp := range wch {
					now := time.Now()
					if err := resp.Err(); err != nil {
						errc <- fmt.Errorf("watch %d: %w", i, err)
						return
					}
					for range resp.Events {
						arrivals[i] = append(arrivals[i], now)
					}
					if len(arrivals[i]) >= puts {
						return
					}
				}
				if ctx.Err() == nil {
					errc <- fmt.Errorf("watch %d: channel closed after %d events", i, len(arrivals[i]))
				}
			}()
		}
	}

	val := make([]byte, notifyValSize)
	_, _ = rand.Read(val)
	sent := make([]time.Time, 0, puts)
	tick := time.NewTicker(time.Second / notifyRate)
	defer tick.Stop()
	begin := time.Now()
	for range puts {
		select {
		case <-tick.C:
		case err := <-errc:
			return measurement{}, err
		case <-ctx.Done():
			return measurement{}, ctx.Err()
		}
		start := time.Now()
		if _, err := pcli.Put(ctx, notifyKey, string(val)); err != nil {
			return measurement{}, fmt.Errorf("put: %w", err)
		}
		sent = append(sent, start)
	}
	secs := time.Since(begin).Seconds()

	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case err := <-errc:
		return measurement{}, err
	case <-time.After(30 * time.Second):
		return measurement{}, errors.New("watchers did not receive every event within 30s of the last put")
	case <-ctx.Done():
		return measurement{}, ctx.Err()
	}
	select {
	case err := <-errc:
		return measurement{}, err
	default:
	}

	lat := make([]float64, 0, len(arrivals)*puts)
	for _, at := range arrivals {
		for j, t := range at[:puts] {
			lat = append(lat, t.Sub(sent[j]).Seconds())
		}
	}
	slices.Sort(lat)
	p50, p99 := nearestRank(lat, 0.50), nearestRank(lat, 0.99)
	return measurement{Value: float64(puts) / secs, Secs: secs, P50: &p50, P99: &p99}, nil
}

// nearestRank is the q-quantile of sorted xs by the nearest-rank method.
func nearestRank(sorted []float64, q float64) float64 {
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
