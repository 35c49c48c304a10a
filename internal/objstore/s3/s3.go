package s3

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/credentials/ec2rolecreds"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/logging"
	"github.com/aws/smithy-go/middleware"

	"github.com/netsy-io/netsy/internal/objstore"
)

// DefaultRegion is used when neither Options nor the environment name one;
// MinIO and most S3-compatible services accept it.
const DefaultRegion = "us-east-1"

// Options configure Open. Only Bucket is required.
type Options struct {
	// Bucket holds every object.
	Bucket string
	// Prefix is prepended to every key ("netsy/prod" stores "members.json"
	// as "netsy/prod/members.json"); a trailing '/' is implied.
	Prefix string
	// Endpoint is the service URL, e.g. "http://127.0.0.1:9000" for MinIO;
	// empty: AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL, else AWS S3 itself.
	Endpoint string
	// Region signs requests; empty: AWS_REGION etc., else DefaultRegion.
	Region string
	// PathStyle addresses the bucket in the path (http://host/bucket/key)
	// rather than the host name; MinIO and most self-hosted services need it.
	PathStyle bool
	// AccessKeyID and SecretAccessKey (and optional SessionToken) are static
	// credentials; empty: the SDK's default credential chain.
	AccessKeyID, SecretAccessKey, SessionToken string
}

// Store is an objstore.Store over one S3 bucket and prefix.
type Store struct {
	client *awss3.Client
	idle   interface{ CloseIdleConnections() } // nil if the HTTP client cannot
	bucket string
	prefix string
	// pageSize bounds ListObjectsV2 pages; tests shrink it to exercise paging.
	pageSize int32
}

var _ objstore.Store = (*Store)(nil)

// responseHeaderTimeout bounds the wait for an answer to one attempt.
const responseHeaderTimeout = 15 * time.Second

// Open builds a Store. It performs no request: a wrong bucket or credentials
// surface on the first call, wrapped with the operation and key.
func Open(ctx context.Context, o Options) (*Store, error) {
	if o.Bucket == "" {
		return nil, errors.New("s3 store: bucket is required")
	}
	prefix, err := normalizePrefix(o.Prefix)
	if err != nil {
		return nil, err
	}
	loadOpts := []func(*config.LoadOptions) error{
		// The SDK's own buildable client, so AWS_CA_BUNDLE and friends still apply.
		config.WithHTTPClient(awshttp.NewBuildableClient().WithTransportOptions(func(tr *http.Transport) {
			tr.MaxIdleConnsPerHost = 32 // racing CAS writers and uploads share one host
			// A server that takes the connection and never answers (a
			// frozen process) fails the attempt instead of holding it
			// forever; the clock starts once the request is written, so
			// a large upload is not cut short.
			tr.ResponseHeaderTimeout = responseHeaderTimeout
		})),
		config.WithRequestChecksumCalculation(aws.RequestChecksumCalculationWhenRequired),
		config.WithResponseChecksumValidation(aws.ResponseChecksumValidationWhenRequired),
		// The SDK's own logger writes "SDK ... WARN" lines to stderr
		// outside the node's log (an IMDSv1 fallback, for one); every
		// failure that matters reaches us as an error instead.
		config.WithLogger(logging.Nop{}),
	}
	if o.Region != "" {
		loadOpts = append(loadOpts, config.WithRegion(o.Region))
	}
	if o.AccessKeyID != "" || o.SecretAccessKey != "" {
		if o.AccessKeyID == "" || o.SecretAccessKey == "" {
			return nil, errors.New("s3 store: static credentials need both an access key id and a secret access key")
		}
		loadOpts = append(loadOpts, config.WithCredentialsProvider(
			credentials.NewStaticCredentialsProvider(o.AccessKeyID, o.SecretAccessKey, o.SessionToken)))
	}
	cfg, err := config.LoadDefaultConfig(ctx, loadOpts...)
	if err != nil {
		return nil, fmt.Errorf("s3 store: load AWS config: %w", err)
	}
	if cfg.Region == "" {
		cfg.Region = DefaultRegion
	}
	if o.AccessKeyID == "" && aws.IsCredentialsProvider(cfg.Credentials, (*ec2rolecreds.Provider)(nil)) {
		// The SDK found no credentials anywhere and will ask the EC2
		// instance metadata service as its last resort. Off EC2 that fails
		// with an IMDS error that says nothing of what to set.
		cfg.Credentials = aws.NewCredentialsCache(instanceRoleOnly{cfg.Credentials})
	}
	// Freeze the client so this store owns one connection pool that Close
	// can drain; otherwise idle connections outlive the store.
	var idle interface{ CloseIdleConnections() }
	if bc, ok := cfg.HTTPClient.(*awshttp.BuildableClient); ok {
		cfg.HTTPClient = bc.Freeze()
	}
	if c, ok := cfg.HTTPClient.(interface{ CloseIdleConnections() }); ok {
		idle = c
	}
	client := awss3.NewFromConfig(cfg, func(so *awss3.Options) {
		so.UsePathStyle = o.PathStyle
		if o.Endpoint != "" {
			so.BaseEndpoint = aws.String(o.Endpoint)
		}
		so.APIOptions = append(so.APIOptions, dropPerRequestExtras)
		// BaseEndpoint here also reflects AWS_ENDPOINT_URL(_S3).
		if loopbackHTTP(aws.ToString(so.BaseEndpoint)) {
			so.APIOptions = append(so.APIOptions, v4.SwapComputePayloadSHA256ForUnsignedPayloadMiddleware)
		}
	})
	return &Store{client: client, idle: idle, bucket: o.Bucket, prefix: prefix, pageSize: 1000}, nil
}

// ErrNoCredentials means no credentials were configured and no EC2
// instance role could be found either. It comes wrapped with
// objstore.ErrMisconfigured and a message naming what to set.
var ErrNoCredentials = errors.New("no S3 credentials found")

// instanceRoleOnly is the credential chain when only the EC2 instance role
// is left to try: a failed lookup becomes ErrNoCredentials.
type instanceRoleOnly struct{ role aws.CredentialsProvider }

func (p instanceRoleOnly) Retrieve(ctx context.Context) (aws.Credentials, error) {
	c, err := p.role.Retrieve(ctx)
	if err != nil && ctx.Err() == nil {
		return c, &noCredentialsError{lookup: err}
	}
	return c, err
}

type noCredentialsError struct{ lookup error }

func (e *noCredentialsError) Error() string {
	return fmt.Sprintf("%v: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN for temporary credentials), "+
		"or AWS_PROFILE to use a profile of ~/.aws/credentials; on EC2 an instance role works too (looking one up failed: %v)",
		ErrNoCredentials, e.lookup)
}

func (e *noCredentialsError) Is(target error) bool { return target == ErrNoCredentials }

// dropPerRequestExtras removes two middlewares that allocate on every
// request and send nothing Netsy or the service needs: the SDK's
// User-Agent (rebuilt per call) and the amz-sdk-invocation-id header (a
// fresh random UUID per call, for AWS-side retry tracing). A future SDK
// that renames them only loses the saving; TestRequestHeaders notices.
func dropPerRequestExtras(stack *middleware.Stack) error {
	_, _ = stack.Build.Remove("UserAgent")
	_, _ = stack.Build.Remove("ClientRequestID")
	return nil
}

// loopbackHTTP reports whether endpoint is plain HTTP to this host. Only
// there is the SigV4 payload hash dropped (UNSIGNED-PAYLOAD): the SDK already
// drops it over HTTPS, where TLS protects the body, and on loopback nobody
// without root on this host sits between us and the service. Over plain HTTP
// on a network the hash is what stops the body being altered in flight, so
// it stays; Netsy's CRC framing catches corruption but not tampering.
func loopbackHTTP(endpoint string) bool {
	u, err := url.Parse(endpoint)
	if err != nil || u.Scheme != "http" {
		return false
	}
	if strings.EqualFold(u.Hostname(), "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(u.Hostname())
	return err == nil && ip.IsLoopback()
}

func normalizePrefix(p string) (string, error) {
	p = strings.Trim(p, "/")
	if p == "" {
		return "", nil
	}
	if err := objstore.ValidateKey(p); err != nil {
		return "", fmt.Errorf("s3 store: prefix: %w", err)
	}
	return p + "/", nil
}

// Bucket and Prefix report where the store keeps its objects.
func (s *Store) Bucket() string { return s.bucket }

// Prefix returns the key prefix, with its trailing '/', or "".
func (s *Store) Prefix() string { return s.prefix }

// Get implements objstore.Store.
func (s *Store) Get(ctx context.Context, key string) ([]byte, string, error) {
	if err := objstore.ValidateKey(key); err != nil {
		return nil, "", fmt.Errorf("s3 get %q: %w", key, err)
	}
	out, err := s.client.GetObject(ctx, &awss3.GetObjectInput{Bucket: &s.bucket, Key: aws.String(s.prefix + key)})
	if err != nil {
		return nil, "", fmt.Errorf("s3 get %q: %w", key, mapErr(opGet, err))
	}
	defer out.Body.Close()
	body, err := io.ReadAll(out.Body)
	if err != nil {
		return nil, "", fmt.Errorf("s3 get %q: read body: %w", key, mapErr(opGet, err))
	}
	return body, unquote(out.ETag), nil
}

// GetReader implements objstore.Store.
func (s *Store) GetReader(ctx context.Context, key string) (io.ReadCloser, string, error) {
	if err := objstore.ValidateKey(key); err != nil {
		return nil, "", fmt.Errorf("s3 get %q: %w", key, err)
	}
	out, err := s.client.GetObject(ctx, &awss3.GetObjectInput{Bucket: &s.bucket, Key: aws.String(s.prefix + key)})
	if err != nil {
		return nil, "", fmt.Errorf("s3 get %q: %w", key, mapErr(opGet, err))
	}
	return &bodyReader{key: key, body: out.Body}, unquote(out.ETag), nil
}

// bodyReader passes read errors of a streamed body through mapErr. The
// HTTP client already turns a body cut short of its Content-Length into
// io.ErrUnexpectedEOF, so the stream never ends early with io.EOF.
type bodyReader struct {
	key  string
	body io.ReadCloser
}

func (b *bodyReader) Read(p []byte) (int, error) {
	n, err := b.body.Read(p)
	if err != nil && err != io.EOF {
		err = fmt.Errorf("s3 get %q: read body: %w", b.key, mapErr(opGet, err))
	}
	return n, err
}

func (b *bodyReader) Close() error { return b.body.Close() }

// PutIfAbsentFrom implements objstore.Store. The SDK gets r itself as the
// body: it seeks it back to the start before each of its own retries (and,
// over plain HTTP, after reading it once to sign the payload), so nothing
// is buffered. A body that fails part-way through the send leaves the
// service with fewer bytes than Content-Length, and it stores nothing.
func (s *Store) PutIfAbsentFrom(ctx context.Context, key string, r io.ReadSeeker, size int64) (string, error) {
	if err := objstore.ValidateKey(key); err != nil {
		return "", fmt.Errorf("s3 put-if-absent %q: %w", key, err)
	}
	if err := objstore.CheckBody(r, size); err != nil {
		return "", fmt.Errorf("s3 put-if-absent %q: %w", key, err)
	}
	out, err := s.client.PutObject(ctx, &awss3.PutObjectInput{
		Bucket:        &s.bucket,
		Key:           aws.String(s.prefix + key),
		Body:          r,
		ContentLength: aws.Int64(size),
		IfNoneMatch:   aws.String("*"),
	})
	if err != nil {
		return "", fmt.Errorf("s3 put-if-absent %q: %w", key, mapErr(opPutIfAbsent, err))
	}
	return unquote(out.ETag), nil
}

// PutIfAbsent implements objstore.Store: PutIfAbsentFrom over the bytes.
func (s *Store) PutIfAbsent(ctx context.Context, key string, body []byte) (string, error) {
	return s.PutIfAbsentFrom(ctx, key, bytes.NewReader(body), int64(len(body)))
}

// PutIfMatch implements objstore.Store.
func (s *Store) PutIfMatch(ctx context.Context, key string, body []byte, etag string) (string, error) {
	if err := objstore.ValidateKey(key); err != nil {
		return "", fmt.Errorf("s3 put-if-match %q: %w", key, err)
	}
	if err := objstore.ValidateETag(etag); err != nil {
		return "", fmt.Errorf("s3 put-if-match %q: %w", key, err)
	}
	out, err := s.client.PutObject(ctx, &awss3.PutObjectInput{
		Bucket:        &s.bucket,
		Key:           aws.String(s.prefix + key),
		Body:          bytes.NewReader(body),
		ContentLength: aws.Int64(int64(len(body))),
		// RFC 7232 entity-tags are quoted; callers hold them unquoted.
		IfMatch: aws.String(`"` + etag + `"`),
	})
	if err != nil {
		return "", fmt.Errorf("s3 put-if-match %q: %w", key, mapErr(opPutIfMatch, err))
	}
	return unquote(out.ETag), nil
}

// Delete implements objstore.Store. S3 answers 204 for a missing key, so no
// special case is needed for idempotence.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := objstore.ValidateKey(key); err != nil {
		return fmt.Errorf("s3 delete %q: %w", key, err)
	}
	_, err := s.client.DeleteObject(ctx, &awss3.DeleteObjectInput{Bucket: &s.bucket, Key: aws.String(s.prefix + key)})
	if err != nil {
		return fmt.Errorf("s3 delete %q: %w", key, mapErr(opDelete, err))
	}
	return nil
}

// List implements objstore.Store.
func (s *Store) List(ctx context.Context, prefix, startAfter string, limit int) ([]objstore.ObjectInfo, error) {
	in := &awss3.ListObjectsV2Input{Bucket: &s.bucket, Prefix: aws.String(s.prefix + prefix)}
	if startAfter != "" {
		in.StartAfter = aws.String(s.prefix + startAfter)
	}
	var out []objstore.ObjectInfo
	for {
		in.MaxKeys = aws.Int32(s.pageSize)
		if limit > 0 && limit-len(out) < int(s.pageSize) {
			in.MaxKeys = aws.Int32(int32(limit - len(out)))
		}
		page, err := s.client.ListObjectsV2(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("s3 list %q after %q: %w", prefix, startAfter, mapErr(opList, err))
		}
		for _, o := range page.Contents {
			key, ok := strings.CutPrefix(aws.ToString(o.Key), s.prefix)
			if !ok {
				continue // cannot happen with a prefix filter; never hand out a foreign key
			}
			out = append(out, objstore.ObjectInfo{
				Key:          key,
				Size:         aws.ToInt64(o.Size),
				ETag:         unquote(o.ETag),
				LastModified: aws.ToTime(o.LastModified),
			})
		}
		if !aws.ToBool(page.IsTruncated) || (limit > 0 && len(out) >= limit) {
			return out, nil
		}
		in.ContinuationToken = page.NextContinuationToken
	}
}

// Close drops idle connections; in-flight calls finish normally.
func (s *Store) Close() error {
	if s.idle != nil {
		s.idle.CloseIdleConnections()
	}
	return nil
}

func unquote(etag *string) string { return strings.Trim(aws.ToString(etag), `"`) }

type op int

const (
	opGet op = iota
	opPutIfAbsent
	opPutIfMatch
	opDelete
	opList
)

// mapErr is the one place S3 errors become objstore errors. The sentinel is
// wrapped together with the original error so logs keep the service's code
// and request id.
func mapErr(o op, err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	// Before the status codes: the failed instance-role lookup carries the
	// metadata service's HTTP status, which is not the bucket's answer.
	var noCreds *noCredentialsError
	if errors.As(err, &noCreds) {
		return fmt.Errorf("%w: %w", objstore.ErrMisconfigured, noCreds)
	}
	code, status := "", 0
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		code = apiErr.ErrorCode()
	}
	var httpErr interface{ HTTPStatusCode() int }
	if errors.As(err, &httpErr) {
		status = httpErr.HTTPStatusCode()
	}
	conditional := o == opPutIfAbsent || o == opPutIfMatch
	switch {
	case code == "NoSuchBucket":
		// A missing bucket is configuration, not a missing object: callers
		// treating ErrNotFound as "start empty" must not do so here.
		return fmt.Errorf("%w: bucket does not exist: %w", objstore.ErrMisconfigured, err)
	case code == "InvalidAccessKeyId" || code == "SignatureDoesNotMatch" || code == "AccessDenied" ||
		code == "InvalidToken" || code == "ExpiredToken" || status == http.StatusForbidden:
		return fmt.Errorf("%w: credentials rejected: %w", objstore.ErrMisconfigured, err)
	case code == "PermanentRedirect" || code == "AuthorizationHeaderMalformed" || status == http.StatusMovedPermanently:
		return fmt.Errorf("%w: wrong region or endpoint for the bucket: %w", objstore.ErrMisconfigured, err)
	case code == "PreconditionFailed" || status == http.StatusPreconditionFailed:
		return fmt.Errorf("%w: %w", objstore.ErrPreconditionFailed, err)
	case conditional && (code == "ConditionalRequestConflict" || status == http.StatusConflict):
		// Another conditional write to the key was in flight; S3 tells the
		// loser to re-read and retry, exactly what a precondition failure asks.
		return fmt.Errorf("%w: %w", objstore.ErrPreconditionFailed, err)
	case o == opPutIfMatch && (code == "NoSuchKey" || status == http.StatusNotFound):
		return fmt.Errorf("%w: %w", objstore.ErrPreconditionFailed, err)
	case code == "NoSuchKey" || code == "NotFound" || status == http.StatusNotFound:
		return fmt.Errorf("%w: %w", objstore.ErrNotFound, err)
	}
	return err
}
