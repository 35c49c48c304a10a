package open_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/netsy-io/netsy/internal/objstore"
	"github.com/netsy-io/netsy/internal/objstore/fs"
	"github.com/netsy-io/netsy/internal/objstore/open"
	"github.com/netsy-io/netsy/internal/objstore/s3"
	"github.com/netsy-io/netsy/internal/testutil/miniotest"
)

func TestOpenFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "objects")
	for _, u := range []string{"file://" + dir, "file://localhost" + dir, "file://" + dir + "/"} {
		st, err := open.Open(context.Background(), u, open.Options{})
		if err != nil {
			t.Fatalf("Open(%q): %v", u, err)
		}
		f, ok := st.(*fs.Store)
		if !ok || f.Root() != dir {
			t.Fatalf("Open(%q) = %T rooted at %v", u, st, f)
		}
		st.Close()
	}
	// A path with a space travels percent-encoded.
	spaced := filepath.Join(t.TempDir(), "with space")
	st, err := open.Open(context.Background(), "file://"+strings.ReplaceAll(spaced, " ", "%20"), open.Options{})
	if err != nil || st.(*fs.Store).Root() != spaced {
		t.Fatalf("Open(percent-encoded) = %v, %v", st, err)
	}
}

func TestOpenS3Parsing(t *testing.T) {
	cases := []struct{ url, bucket, prefix string }{
		{"s3://netsy-bucket", "netsy-bucket", ""},
		{"s3://netsy-bucket/", "netsy-bucket", ""},
		{"s3://netsy.bucket/cluster/prod", "netsy.bucket", "cluster/prod/"},
		{"s3://b01/p/", "b01", "p/"},
	}
	for _, c := range cases {
		st, err := open.Open(context.Background(), c.url, open.Options{S3Region: "us-east-1"})
		if err != nil {
			t.Fatalf("Open(%q): %v", c.url, err)
		}
		s, ok := st.(*s3.Store)
		if !ok || s.Bucket() != c.bucket || s.Prefix() != c.prefix {
			t.Fatalf("Open(%q) = %T bucket %q prefix %q", c.url, st, s.Bucket(), s.Prefix())
		}
		st.Close()
	}
}

func TestOpenErrors(t *testing.T) {
	cases := map[string]string{
		"":                             "missing scheme",
		"/abs/path":                    "missing scheme",
		"relative/dir":                 "missing scheme",
		"file:relative":                "absolute path",
		"file://relative/dir":          "three slashes",
		"file://":                      "absolute path",
		"ftp://host/x":                 `unsupported scheme "ftp"`,
		"s3://":                        "missing bucket",
		"s3:bucket":                    "s3://",
		"s3://127.0.0.1:9000/bucket":   "lowercase letters",
		"s3://My_Bucket":               "lowercase letters",
		"s3://ab":                      "3 to 63",
		"s3://key:secret@bucket":       "credentials",
		"s3://bucket?region=x":         "query",
		"s3://bucket/a//b":             "invalid key",
		"s3://bucket/prefix/../escape": "invalid key",
		"file:///x#frag":               "fragment",
		"::not a url":                  "missing protocol scheme",
	}
	for u, want := range cases {
		_, err := open.Open(context.Background(), u, open.Options{})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Open(%q) = %v, want error containing %q", u, err, want)
		}
	}
}

// TestOpenS3MinIO round-trips through a real MinIO with the same options the
// node's flags produce.
func TestOpenS3MinIO(t *testing.T) {
	srv := miniotest.Start(t)
	st, err := open.Open(t.Context(), "s3://"+srv.Bucket+"/netsy", open.Options{
		S3Endpoint: srv.Endpoint, S3Region: srv.Region, S3PathStyle: true,
		S3AccessKeyID: srv.AccessKey, S3SecretAccessKey: srv.SecretKey,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	etag, err := st.PutIfAbsent(t.Context(), "members.json", []byte(`{"v":1}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.PutIfAbsent(t.Context(), "members.json", []byte(`{"v":2}`)); !errors.Is(err, objstore.ErrPreconditionFailed) {
		t.Fatalf("second create = %v", err)
	}
	body, got, err := st.Get(t.Context(), "members.json")
	if err != nil || got != etag || string(body) != `{"v":1}` {
		t.Fatalf("Get = %q %q %v", body, got, err)
	}
}
