package s3

import (
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/minio/minio-go/v7"
	"go.uber.org/goleak"

	"github.com/netsy-io/netsy/internal/objstore"
	"github.com/netsy-io/netsy/internal/objstore/storetest"
	"github.com/netsy-io/netsy/internal/testutil/miniotest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func openMinIO(t *testing.T, srv *miniotest.Server, bucket, prefix string) *Store {
	t.Helper()
	s, err := Open(t.Context(), Options{
		Bucket:          bucket,
		Prefix:          prefix,
		Endpoint:        srv.Endpoint,
		Region:          srv.Region,
		PathStyle:       true,
		AccessKeyID:     srv.AccessKey,
		SecretAccessKey: srv.SecretKey,
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestS3Conformance runs the objstore suite against a real MinIO. Each
// subtest gets its own key prefix (which also proves prefixes are
// invisible to callers) and a tiny List page so paging is exercised.
func TestS3Conformance(t *testing.T) {
	srv := miniotest.Start(t)
	var n atomic.Int32
	storetest.Run(t, func(t *testing.T) objstore.Store {
		s := openMinIO(t, srv, srv.Bucket, fmt.Sprintf("conformance/%03d", n.Add(1)))
		s.pageSize = 3
		return s
	})
}

// TestS3ConformanceBucketRoot runs the suite without a prefix, one fresh
// bucket per subtest, with the production page size.
func TestS3ConformanceBucketRoot(t *testing.T) {
	srv := miniotest.Start(t)
	var n atomic.Int32
	storetest.Run(t, func(t *testing.T) objstore.Store {
		bucket := fmt.Sprintf("root-%03d", n.Add(1))
		srv.CreateBucket(t, bucket)
		return openMinIO(t, srv, bucket, "")
	})
}

func TestPrefixIsolation(t *testing.T) {
	srv := miniotest.Start(t)
	ctx := t.Context()
	raw := srv.Client(t)
	for _, k := range []string{"outside", "tenant-b/key", "tenant/key"} {
		if _, err := raw.PutObject(ctx, srv.Bucket, k, strings.NewReader("foreign"), 7, minio.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	s := openMinIO(t, srv, srv.Bucket, "/tenant/") // slashes are normalized
	defer s.Close()
	if s.Prefix() != "tenant/" {
		t.Fatalf("prefix = %q", s.Prefix())
	}
	if _, err := s.PutIfAbsent(ctx, "mine", []byte("x")); err != nil {
		t.Fatal(err)
	}
	infos, err := s.List(ctx, "", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 2 || infos[0].Key != "key" || infos[1].Key != "mine" {
		t.Fatalf("List = %+v; want [key mine] (tenant-b/ must not leak in)", infos)
	}
	if _, _, err := s.Get(ctx, "outside"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("Get(outside) = %v", err)
	}
	if _, err := raw.StatObject(ctx, srv.Bucket, "tenant/mine", minio.StatObjectOptions{}); err != nil {
		t.Fatalf("object not stored under the prefix: %v", err)
	}
}

func TestMissingBucketIsNotNotFound(t *testing.T) {
	srv := miniotest.Start(t)
	s := openMinIO(t, srv, "no-such-bucket", "")
	defer s.Close()
	_, _, err := s.Get(t.Context(), "k")
	if err == nil || errors.Is(err, objstore.ErrNotFound) || !strings.Contains(err.Error(), "bucket does not exist") {
		t.Fatalf("Get in a missing bucket = %v; want a bucket error that is not ErrNotFound", err)
	}
	_, err = s.List(t.Context(), "", "", 0)
	if err == nil || !strings.Contains(err.Error(), "bucket does not exist") {
		t.Fatalf("List in a missing bucket = %v", err)
	}
}

// TestMinIOBehaviour pins, with raw SDK calls, the MinIO behaviours the
// objstore contract and the rest of Netsy are designed around. If a MinIO
// upgrade changes one of them, this test names the assumption that broke.
func TestMinIOBehaviour(t *testing.T) {
	srv := miniotest.Start(t)
	s := openMinIO(t, srv, srv.Bucket, "")
	defer s.Close()
	ctx := t.Context()
	c, bucket := s.client, aws.String(srv.Bucket)
	put := func(key, body string, mod func(*awss3.PutObjectInput)) (*awss3.PutObjectOutput, error) {
		in := &awss3.PutObjectInput{Bucket: bucket, Key: aws.String(key), Body: strings.NewReader(body)}
		if mod != nil {
			mod(in)
		}
		return c.PutObject(ctx, in)
	}
	apiCode := func(err error) (string, int) {
		var ae smithy.APIError
		var he interface{ HTTPStatusCode() int }
		code, status := "", 0
		if errors.As(err, &ae) {
			code = ae.ErrorCode()
		}
		if errors.As(err, &he) {
			status = he.HTTPStatusCode()
		}
		return code, status
	}

	t.Run("ETagIsQuotedMD5OfBody", func(t *testing.T) {
		out, err := put("md5", "hello etag", nil)
		if err != nil {
			t.Fatal(err)
		}
		sum := md5.Sum([]byte("hello etag"))
		if want := `"` + hex.EncodeToString(sum[:]) + `"`; aws.ToString(out.ETag) != want {
			t.Fatalf("ETag = %s, want %s", aws.ToString(out.ETag), want)
		}
	})

	t.Run("IfNoneMatchOnExistingIs412", func(t *testing.T) {
		if _, err := put("inm", "v1", nil); err != nil {
			t.Fatal(err)
		}
		_, err := put("inm", "v2", func(in *awss3.PutObjectInput) { in.IfNoneMatch = aws.String("*") })
		if code, status := apiCode(err); code != "PreconditionFailed" || status != 412 {
			t.Fatalf("If-None-Match:* on existing = %q %d (%v), want PreconditionFailed 412", code, status, err)
		}
	})

	t.Run("IfMatchOnMissingKeyIs404NoSuchKey", func(t *testing.T) {
		_, err := put("never-existed", "v", func(in *awss3.PutObjectInput) { in.IfMatch = aws.String(`"0123456789abcdef0123456789abcdef"`) })
		if code, status := apiCode(err); code != "NoSuchKey" || status != 404 {
			t.Fatalf("If-Match on missing key = %q %d (%v), want NoSuchKey 404", code, status, err)
		}
	})

	t.Run("IfMatchHonouredOnPut", func(t *testing.T) {
		out, err := put("im", "v1", nil)
		if err != nil {
			t.Fatal(err)
		}
		_, err = put("im", "v2", func(in *awss3.PutObjectInput) { in.IfMatch = aws.String(`"0123456789abcdef0123456789abcdef"`) })
		if code, status := apiCode(err); code != "PreconditionFailed" || status != 412 {
			t.Fatalf("If-Match stale = %q %d (%v), want PreconditionFailed 412", code, status, err)
		}
		// Both the quoted form we send and the bare form are accepted.
		out2, err := put("im", "v2", func(in *awss3.PutObjectInput) { in.IfMatch = out.ETag })
		if err != nil {
			t.Fatalf("If-Match quoted: %v", err)
		}
		if _, err := put("im", "v3", func(in *awss3.PutObjectInput) { in.IfMatch = aws.String(strings.Trim(*out2.ETag, `"`)) }); err != nil {
			t.Fatalf("If-Match unquoted: %v", err)
		}
	})

	t.Run("IfMatchIgnoredOnDelete", func(t *testing.T) {
		if _, err := put("del", "v1", nil); err != nil {
			t.Fatal(err)
		}
		_, err := c.DeleteObject(ctx, &awss3.DeleteObjectInput{Bucket: bucket, Key: aws.String("del"), IfMatch: aws.String(`"0123456789abcdef0123456789abcdef"`)})
		if err != nil {
			t.Fatalf("DeleteObject with a wrong If-Match failed (%v): MinIO now honours it; revisit objstore's no-conditional-delete rule", err)
		}
		_, err = c.HeadObject(ctx, &awss3.HeadObjectInput{Bucket: bucket, Key: aws.String("del")})
		if _, status := apiCode(err); status != 404 {
			t.Fatalf("object survived a DELETE with a wrong If-Match (%v): MinIO now honours it", err)
		}
	})

	t.Run("DeleteMissingSucceeds", func(t *testing.T) {
		if _, err := c.DeleteObject(ctx, &awss3.DeleteObjectInput{Bucket: bucket, Key: aws.String("nothing-here")}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("ListHidesKeysBelowAnObjectName", func(t *testing.T) {
		// Why the objstore contract forbids "n" next to "n/…": both writes
		// and both reads succeed, but List loses the deeper key.
		for _, k := range []string{"nest", "nest/inner"} {
			if _, err := put(k, "v", nil); err != nil {
				t.Fatal(err)
			}
			if _, err := c.HeadObject(ctx, &awss3.HeadObjectInput{Bucket: bucket, Key: aws.String(k)}); err != nil {
				t.Fatalf("head %s: %v", k, err)
			}
		}
		out, err := c.ListObjectsV2(ctx, &awss3.ListObjectsV2Input{Bucket: bucket, Prefix: aws.String("nest")})
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		for _, o := range out.Contents {
			keys = append(keys, aws.ToString(o.Key))
		}
		if len(keys) != 1 || keys[0] != "nest" {
			t.Fatalf("List(nest) = %q; MinIO now lists nested keys, the objstore nesting rule could be relaxed", keys)
		}
	})

	t.Run("GetReturnsSameETag", func(t *testing.T) {
		out, err := put("ge", "body", nil)
		if err != nil {
			t.Fatal(err)
		}
		g, err := c.GetObject(ctx, &awss3.GetObjectInput{Bucket: bucket, Key: aws.String("ge")})
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, g.Body)
		g.Body.Close()
		if aws.ToString(g.ETag) != aws.ToString(out.ETag) {
			t.Fatalf("GET ETag %s != PUT ETag %s", aws.ToString(g.ETag), aws.ToString(out.ETag))
		}
	})
}

// TestMapErr covers the service answers MinIO never gives but AWS S3 does.
func TestMapErr(t *testing.T) {
	respErr := func(status int, code string) error {
		return &smithy.OperationError{ServiceID: "S3", OperationName: "PutObject", Err: &smithyhttp.ResponseError{
			Response: &smithyhttp.Response{Response: &http.Response{StatusCode: status}},
			Err:      &smithy.GenericAPIError{Code: code, Message: "test"},
		}}
	}
	cases := []struct {
		op     op
		status int
		code   string
		want   error
	}{
		{opPutIfMatch, 409, "ConditionalRequestConflict", objstore.ErrPreconditionFailed},
		{opPutIfAbsent, 409, "ConditionalRequestConflict", objstore.ErrPreconditionFailed},
		{opPutIfAbsent, 409, "SomethingNew", objstore.ErrPreconditionFailed},
		{opPutIfMatch, 412, "PreconditionFailed", objstore.ErrPreconditionFailed},
		{opPutIfMatch, 404, "NoSuchKey", objstore.ErrPreconditionFailed},
		{opGet, 404, "NoSuchKey", objstore.ErrNotFound},
		{opGet, 404, "NotFound", objstore.ErrNotFound},
		{opGet, 404, "NoSuchBucket", objstore.ErrMisconfigured},
		{opPutIfMatch, 404, "NoSuchBucket", objstore.ErrMisconfigured},
		{opDelete, 409, "OperationAborted", nil},
		{opGet, 500, "InternalError", nil},
		{opGet, 503, "SlowDown", nil},
		{opGet, 403, "AccessDenied", objstore.ErrMisconfigured},
		{opList, 403, "InvalidAccessKeyId", objstore.ErrMisconfigured},
		{opPutIfAbsent, 403, "SignatureDoesNotMatch", objstore.ErrMisconfigured},
		{opGet, 301, "PermanentRedirect", objstore.ErrMisconfigured},
	}
	for _, c := range cases {
		err := mapErr(c.op, respErr(c.status, c.code))
		for _, sentinel := range []error{objstore.ErrNotFound, objstore.ErrPreconditionFailed, objstore.ErrMisconfigured} {
			if got := errors.Is(err, sentinel); got != (sentinel == c.want) {
				t.Errorf("op %d %d %s: errors.Is(%v) = %v", c.op, c.status, c.code, sentinel, got)
			}
		}
		if !strings.Contains(err.Error(), c.code) {
			t.Errorf("mapped error %q lost the service code %s", err, c.code)
		}
	}
	if err := mapErr(opGet, fmt.Errorf("op: %w", context.Canceled)); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled = %v", err)
	}
}

func TestOpenValidation(t *testing.T) {
	ctx := context.Background()
	if _, err := Open(ctx, Options{}); err == nil {
		t.Error("Open without bucket succeeded")
	}
	if _, err := Open(ctx, Options{Bucket: "b", Prefix: "a//b"}); !errors.Is(err, objstore.ErrInvalidKey) {
		t.Errorf("Open with bad prefix = %v", err)
	}
	if _, err := Open(ctx, Options{Bucket: "b", AccessKeyID: "only-id"}); err == nil {
		t.Error("Open with half static credentials succeeded")
	}
	s, err := Open(ctx, Options{Bucket: "b", Prefix: "x/y/", Region: "eu-west-1"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Prefix() != "x/y/" || s.Bucket() != "b" || s.client.Options().Region != "eu-west-1" {
		t.Errorf("store = %q %q %q", s.Bucket(), s.Prefix(), s.client.Options().Region)
	}
}

func TestLoopbackHTTP(t *testing.T) {
	for endpoint, want := range map[string]bool{
		"http://127.0.0.1:9000":       true,
		"http://127.8.9.10":           true,
		"http://[::1]:9000":           true,
		"http://LOCALHOST:9000":       true,
		"https://127.0.0.1:9000":      false, // the SDK already sends UNSIGNED-PAYLOAD over TLS
		"http://10.0.0.5:9000":        false,
		"http://minio.internal:9000":  false,
		"http://localhost.evil.com":   false,
		"":                            false,
		"://bad":                      false,
		"http://127.0.0.1.nip.io:900": false,
	} {
		if got := loopbackHTTP(endpoint); got != want {
			t.Errorf("loopbackHTTP(%q) = %v, want %v", endpoint, got, want)
		}
	}
}

// cannedTransport answers every request with 200 and an ETag without any
// network, recording the last request's headers.
type cannedTransport struct{ header http.Header }

func (c *cannedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.header = r.Header.Clone()
	if r.Body != nil {
		_, _ = io.Copy(io.Discard, r.Body)
		_ = r.Body.Close()
	}
	h := http.Header{}
	h.Set("ETag", `"0123456789abcdef0123456789abcdef"`)
	return &http.Response{StatusCode: http.StatusOK, Header: h, Body: http.NoBody, Request: r}, nil
}

// openCanned opens a store on endpoint whose requests go to a cannedTransport.
func openCanned(tb testing.TB, endpoint string) (*Store, *cannedTransport) {
	tb.Helper()
	s, err := Open(context.Background(), Options{Bucket: "b", Endpoint: endpoint, PathStyle: true,
		Region: "us-east-1", AccessKeyID: "id", SecretAccessKey: "secret"})
	if err != nil {
		tb.Fatal(err)
	}
	rt := &cannedTransport{}
	s.client = awss3.New(s.client.Options(), func(o *awss3.Options) { o.HTTPClient = &http.Client{Transport: rt} })
	return s, rt
}

// TestRequestHeaders pins what a PUT carries: no per-call User-Agent or
// invocation id, and a signed payload hash except on loopback.
func TestRequestHeaders(t *testing.T) {
	body := []byte("chunk")
	sum := sha256.Sum256(body)
	for endpoint, wantHash := range map[string]string{
		"http://127.0.0.1:9000": "UNSIGNED-PAYLOAD",
		"http://10.0.0.5:9000":  hex.EncodeToString(sum[:]),
	} {
		s, rt := openCanned(t, endpoint)
		if _, err := s.PutIfAbsent(t.Context(), "wal/1", body); err != nil {
			t.Fatal(err)
		}
		if got := rt.header.Get("X-Amz-Content-Sha256"); got != wantHash {
			t.Errorf("%s: X-Amz-Content-Sha256 = %q, want %q", endpoint, got, wantHash)
		}
		if got := rt.header.Get("Authorization"); !strings.Contains(got, "x-amz-content-sha256") {
			t.Errorf("%s: payload hash header not signed: %q", endpoint, got)
		}
		if got := rt.header.Get("Amz-Sdk-Invocation-Id"); got != "" {
			t.Errorf("%s: amz-sdk-invocation-id sent: %q", endpoint, got)
		}
		if got := rt.header.Get("User-Agent"); strings.Contains(got, "aws-sdk-go") {
			t.Errorf("%s: SDK User-Agent sent: %q", endpoint, got)
		}
		if rt.header.Get("If-None-Match") != "*" {
			t.Errorf("%s: If-None-Match = %q", endpoint, rt.header.Get("If-None-Match"))
		}
		s.Close()
	}
}

// BenchmarkPutIfAbsent measures the client side of one WAL-chunk-sized
// PutIfAbsent to a loopback endpoint, without network or server.
func BenchmarkPutIfAbsent(b *testing.B) {
	s, _ := openCanned(b, "http://127.0.0.1:9000")
	defer s.Close()
	body := make([]byte, 16<<10)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, err := s.PutIfAbsent(b.Context(), fmt.Sprintf("wal/%020d", i), body); err != nil {
			b.Fatal(err)
		}
	}
}
