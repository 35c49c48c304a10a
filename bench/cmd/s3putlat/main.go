// s3putlat measures conditional-PUT latency and client CPU per PUT against
// an S3 endpoint (MinIO on loopback) through netsy's s3 store and through
// minio-go, so the cost of our client can be told from the server's. CPU
// is this process's user+system time (getrusage), which excludes the
// server when it runs as another process.
//
//	go run ./bench/cmd/s3putlat -endpoint http://127.0.0.1:PORT -bucket B
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/netsy-io/netsy/internal/objstore/s3"
)

func main() {
	endpoint := flag.String("endpoint", "", "S3 endpoint URL")
	bucket := flag.String("bucket", "", "bucket (must exist)")
	n := flag.Int("n", 1000, "PUTs per client")
	clients := flag.Int("clients", 1, "concurrent PUT loops")
	size := flag.Int("size", 16<<10, "body bytes (a WAL chunk of ~54 256-byte entries is ~16 KiB)")
	clientsOnly := flag.String("only", "", "run one client: netsy or minio-go (default both)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the netsy store run here")
	user := flag.String("access-key", "netsyminio", "")
	pass := flag.String("secret-key", "netsyminiosecret", "")
	flag.Parse()
	ctx := context.Background()
	body := bytes.Repeat([]byte("x"), *size)
	run := fmt.Sprint(time.Now().UnixNano())

	if *clientsOnly == "" || *clientsOnly == "netsy" {
		st, err := s3.Open(ctx, s3.Options{Bucket: *bucket, Endpoint: *endpoint, PathStyle: true,
			Region: "us-east-1", AccessKeyID: *user, SecretAccessKey: *pass})
		if err != nil {
			fail(err)
		}
		if *cpuprofile != "" {
			f, err := os.Create(*cpuprofile)
			if err != nil {
				fail(err)
			}
			if err := pprof.StartCPUProfile(f); err != nil {
				fail(err)
			}
			defer f.Close()
		}
		report("netsy s3 store PutIfAbsent", *n, *clients, func(c, i int) error {
			b := append(slices.Clone(body), fmt.Sprint(i)...)
			_, err := st.PutIfAbsent(ctx, fmt.Sprintf("lat/%s/a/%d/%08d", run, c, i), b)
			return err
		})
		pprof.StopCPUProfile()
	}

	if *clientsOnly == "" || *clientsOnly == "minio-go" {
		mc, err := minio.New(strings.TrimPrefix(*endpoint, "http://"), &minio.Options{
			Creds: credentials.NewStaticV4(*user, *pass, ""), Region: "us-east-1"})
		if err != nil {
			fail(err)
		}
		report("minio-go PutObject If-None-Match", *n, *clients, func(c, i int) error {
			b := append(slices.Clone(body), fmt.Sprint(i)...)
			opts := minio.PutObjectOptions{DisableContentSha256: true}
			opts.SetMatchETagExcept("*")
			_, err := mc.PutObject(ctx, *bucket, fmt.Sprintf("lat/%s/b/%d/%08d", run, c, i), bytes.NewReader(b), int64(len(b)), opts)
			return err
		})
	}
}

// report runs clients loops of n PUTs each and prints throughput, latency
// percentiles and this process's CPU time per PUT.
func report(name string, n, clients int, put func(c, i int) error) {
	lats := make([][]time.Duration, clients)
	cpu0 := cpuTime()
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lat := make([]time.Duration, 0, n)
			for i := range n {
				t := time.Now()
				if err := put(c, i); err != nil {
					errs <- fmt.Errorf("%s: %w", name, err)
					return
				}
				lat = append(lat, time.Since(t))
			}
			lats[c] = lat
		}()
	}
	wg.Wait()
	total := time.Since(start)
	cpu := cpuTime() - cpu0
	select {
	case err := <-errs:
		fail(err)
	default:
	}
	lat := slices.Concat(lats...)
	slices.Sort(lat)
	m := len(lat)
	fmt.Printf("%-32s %6.0f PUT/s  p50 %v  p90 %v  p99 %v  cpu %.1f µs/PUT\n", name, float64(m)/total.Seconds(),
		lat[m/2].Round(time.Microsecond), lat[m*9/10].Round(time.Microsecond), lat[m*99/100].Round(time.Microsecond),
		float64(cpu.Microseconds())/float64(m))
}

// cpuTime is this process's user plus system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		fail(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "s3putlat:", err)
	os.Exit(1)
}
