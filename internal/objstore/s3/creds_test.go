package s3

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/netsy-io/netsy/internal/objstore"
)

// noCredentialsEnv leaves the SDK nothing to find: no credential or
// profile variables, a HOME without ~/.aws, no shared files.
func noCredentialsEnv(t *testing.T) {
	t.Helper()
	home := t.TempDir()
	for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_ACCESS_KEY", "AWS_SECRET_ACCESS_KEY", "AWS_SECRET_KEY", "AWS_SESSION_TOKEN",
		"AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN",
		"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
		"AWS_EC2_METADATA_SERVICE_ENDPOINT", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"} {
		t.Setenv(k, "")
	}
	t.Setenv("HOME", home)
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(home, "no-config"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(home, "no-credentials"))
}

// listWithoutCredentials opens a store on an endpoint nothing listens on
// (the request never gets that far) and returns List's error.
func listWithoutCredentials(t *testing.T) error {
	t.Helper()
	s, err := Open(t.Context(), Options{Bucket: "netsy", Endpoint: "http://127.0.0.1:1", PathStyle: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, err = s.List(t.Context(), "wal/", "", 1)
	return err
}

func checkNoCredentialsError(t *testing.T, err error) {
	t.Helper()
	if !errors.Is(err, objstore.ErrMisconfigured) || !errors.Is(err, ErrNoCredentials) {
		t.Fatalf("List without credentials = %v; want ErrMisconfigured and ErrNoCredentials", err)
	}
	msg := err.Error()
	for _, want := range []string{"no S3 credentials found", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q: %s", want, msg)
		}
	}
	if strings.Contains(msg, "credentials rejected") {
		t.Errorf("missing credentials reported as rejected: %s", msg)
	}
}

func TestNoCredentialsSaysWhatToSet(t *testing.T) {
	noCredentialsEnv(t)
	// The instance-role lookup is refused locally: no request leaves the host.
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	checkNoCredentialsError(t, listWithoutCredentials(t))
}

// TestNoCredentialsSDKStaysQuiet points the instance-metadata lookup at a
// local server that refuses it, as a host with a metadata proxy does: the
// error must still say that no credentials were found, not that the
// metadata service's 403 rejected them, and the SDK must not print its
// own warning (IMDSv1 fallback) on stderr.
func TestNoCredentialsSDKStaysQuiet(t *testing.T) {
	noCredentialsEnv(t)
	t.Setenv("AWS_EC2_METADATA_DISABLED", "false")
	imds := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut {
			w.WriteHeader(http.StatusForbidden) // no IMDSv2 token
			return
		}
		http.NotFound(w, r) // no instance role
	}))
	defer imds.Close()
	t.Setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", imds.URL)

	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := os.Stderr
	os.Stderr = w
	captured := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		captured <- string(b)
	}()
	err = listWithoutCredentials(t)
	os.Stderr = stderr
	w.Close()
	if out := <-captured; out != "" {
		t.Errorf("the SDK wrote to stderr: %q", out)
	}
	r.Close()
	checkNoCredentialsError(t, err)
}
