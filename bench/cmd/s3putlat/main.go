// s3putlat measures sequential conditional-PUT latency against an S3
// endpoint (MinIO on loopback) through netsy's s3 store and through
// minio-go, so the cost of our client can be told from the server's.
//
//	go run ./bench/cmd/s3putlat -endpoint http://127.0.0.1:PORT -bucket B
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/netsy-io/netsy/internal/objstore/s3"
)

func main() {
	endpoint := flag.String("endpoint", "", "S3 endpoint URL")
	bucket := flag.String("bucket", "", "bucket (must exist)")
	n := flag.Int("n", 1000, "PUTs per client")
	size := flag.Int("size", 400, "body bytes")
	user := flag.String("access-key", "netsyminio", "")
	pass := flag.String("secret-key", "netsyminiosecret", "")
	flag.Parse()
	ctx := context.Background()
	body := bytes.Repeat([]byte("x"), *size)
	run := fmt.Sprint(time.Now().UnixNano())

	st, err := s3.Open(ctx, s3.Options{Bucket: *bucket, Endpoint: *endpoint, PathStyle: true,
		Region: "us-east-1", AccessKeyID: *user, SecretAccessKey: *pass})
	if err != nil {
		fail(err)
	}
	report("netsy s3 store PutIfAbsent", *n, func(i int) error {
		b := append(slices.Clone(body), fmt.Sprint(i)...)
		_, err := st.PutIfAbsent(ctx, fmt.Sprintf("lat/%s/a/%08d", run, i), b)
		return err
	})

	mc, err := minio.New(strings.TrimPrefix(*endpoint, "http://"), &minio.Options{
		Creds: credentials.NewStaticV4(*user, *pass, ""), Region: "us-east-1"})
	if err != nil {
		fail(err)
	}
	report("minio-go PutObject If-None-Match", *n, func(i int) error {
		b := append(slices.Clone(body), fmt.Sprint(i)...)
		opts := minio.PutObjectOptions{DisableContentSha256: true}
		opts.SetMatchETagExcept("*")
		_, err := mc.PutObject(ctx, *bucket, fmt.Sprintf("lat/%s/b/%08d", run, i), bytes.NewReader(b), int64(len(b)), opts)
		return err
	})
}

func report(name string, n int, put func(int) error) {
	lat := make([]time.Duration, 0, n)
	start := time.Now()
	for i := range n {
		t := time.Now()
		if err := put(i); err != nil {
			fail(fmt.Errorf("%s: %w", name, err))
		}
		lat = append(lat, time.Since(t))
	}
	total := time.Since(start)
	slices.Sort(lat)
	fmt.Printf("%-36s %6.0f PUT/s  p50 %v  p90 %v  p99 %v\n", name, float64(n)/total.Seconds(),
		lat[n/2].Round(time.Microsecond), lat[n*9/10].Round(time.Microsecond), lat[n*99/100].Round(time.Microsecond))
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "s3putlat:", err)
	os.Exit(1)
}
