// s3putlat measures conditional-PUT latency and client CPU per PUT against
// an S3 endpoint (MinIO on loopback) through netsy's s3 store and through
// minio-go, so the cost of our client can be told from the server's. CPU
// is this process's user+system time (getrusage), which excludes the
// server when it runs as another process. The measuring loop and the
// minio-go PUT are bench/internal/s3put's, the ones netsybench's sync-mode
// table uses for its MinIO baseline.
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
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/netsy-io/netsy/bench/internal/s3put"
	"github.com/netsy-io/netsy/internal/objstore/s3"
)

func main() {
	endpoint := flag.String("endpoint", "", "S3 endpoint URL")
	bucket := flag.String("bucket", "", "bucket (must exist)")
	n := flag.Int("n", 1000, "PUTs per client")
	clients := flag.Int("clients", 1, "concurrent PUT loops")
	size := flag.Int("size", s3put.DefaultSize, "body bytes (a WAL chunk of ~54 256-byte entries is ~16 KiB)")
	clientsOnly := flag.String("only", "", "run one client: netsy or minio-go (default both)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the netsy store run here")
	user := flag.String("access-key", "netsyminio", "")
	pass := flag.String("secret-key", "netsyminiosecret", "")
	flag.Parse()
	ctx := context.Background()
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
		base := bytes.Repeat([]byte("x"), *size)
		report("netsy s3 store PutIfAbsent", *n, *clients, func(ctx context.Context, c, i int) error {
			_, err := st.PutIfAbsent(ctx, fmt.Sprintf("lat/%s/a/%d/%08d", run, c, i), s3put.Body(base, i))
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
		report("minio-go PutObject If-None-Match", *n, *clients, s3put.MinioGo(mc, *bucket, "lat/"+run+"/b", *size))
	}
}

// report runs clients loops of n PUTs each and prints throughput, latency
// percentiles and this process's CPU time per PUT.
func report(name string, n, clients int, put s3put.PutFunc) {
	r, err := s3put.Run(context.Background(), n, clients, put)
	if err != nil {
		fail(fmt.Errorf("%s: %w", name, err))
	}
	fmt.Printf("%-32s %6.0f PUT/s  p50 %v  p90 %v  p99 %v  cpu %.1f µs/PUT\n", name, r.PerSec(),
		r.Pct(50).Round(time.Microsecond), r.Pct(90).Round(time.Microsecond), r.Pct(99).Round(time.Microsecond),
		float64(r.CPUPerPut().Nanoseconds())/1000)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "s3putlat:", err)
	os.Exit(1)
}
