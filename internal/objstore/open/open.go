package open

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path"
	"strings"

	"github.com/netsy-io/netsy/internal/objstore"
	"github.com/netsy-io/netsy/internal/objstore/fs"
	"github.com/netsy-io/netsy/internal/objstore/s3"
)

// Options carry the settings a URL cannot: they apply to s3:// URLs only.
// Anything left empty falls back to the standard AWS environment variables.
type Options struct {
	// S3Endpoint is the service URL (--s3-endpoint), e.g. http://127.0.0.1:9000.
	S3Endpoint string
	// S3Region signs requests (--s3-region).
	S3Region string
	// S3PathStyle puts the bucket in the path (--s3-path-style); MinIO needs it.
	S3PathStyle bool
	// S3AccessKeyID and S3SecretAccessKey are static credentials for tests
	// and embedding; operators use AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY.
	S3AccessKeyID, S3SecretAccessKey string
}

const usage = "use file:///absolute/path or s3://bucket[/prefix]"

// Open returns the Store named by rawURL. It performs no network request.
func Open(ctx context.Context, rawURL string, o Options) (objstore.Store, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("storage URL %q: %w (%s)", rawURL, err, usage)
	}
	bad := func(why string) error {
		return fmt.Errorf("storage URL %q: %s (%s)", rawURL, why, usage)
	}
	if u.User != nil {
		return nil, bad("credentials do not belong in the URL; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, bad("query and fragment are not supported; endpoint and region have their own flags")
	}
	switch u.Scheme {
	case "file":
		if u.Opaque != "" || (u.Host != "" && u.Host != "localhost") {
			return nil, bad("file URLs need an absolute path and three slashes")
		}
		if u.Path == "" || !path.IsAbs(u.Path) {
			return nil, bad("file URLs need an absolute path")
		}
		s, err := fs.Open(path.Clean(u.Path))
		if err != nil {
			return nil, fmt.Errorf("storage URL %q: %w", rawURL, err)
		}
		return s, nil
	case "s3":
		if u.Opaque != "" {
			return nil, bad("s3 URLs start with s3://")
		}
		if err := validBucket(u.Host); err != nil {
			return nil, bad(err.Error())
		}
		s, err := s3.Open(ctx, s3.Options{
			Bucket:          u.Host,
			Prefix:          strings.Trim(u.Path, "/"),
			Endpoint:        o.S3Endpoint,
			Region:          o.S3Region,
			PathStyle:       o.S3PathStyle,
			AccessKeyID:     o.S3AccessKeyID,
			SecretAccessKey: o.S3SecretAccessKey,
		})
		if err != nil {
			return nil, fmt.Errorf("storage URL %q: %w", rawURL, err)
		}
		return s, nil
	case "":
		return nil, bad("missing scheme")
	default:
		return nil, bad(fmt.Sprintf("unsupported scheme %q", u.Scheme))
	}
}

// validBucket applies S3's bucket naming rules loosely: enough to catch a
// typo or a host:port pasted into the bucket position, not to replace the
// service's own check.
func validBucket(b string) error {
	if b == "" {
		return errors.New("missing bucket name")
	}
	if len(b) < 3 || len(b) > 63 {
		return fmt.Errorf("bucket name %q must be 3 to 63 characters", b)
	}
	for _, r := range b {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '.') {
			return fmt.Errorf("bucket name %q may contain only lowercase letters, digits, '-' and '.' (is the endpoint in the bucket position? use --s3-endpoint)", b)
		}
	}
	return nil
}
