//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/netsy-io/netsy/internal/testutil/procutil"
)

// ctl runs the pinned etcdctl against one server, the way an operator does.
type ctl struct {
	t        *testing.T
	bin      string
	endpoint string
}

func newCtl(t *testing.T, s *procutil.Server) *ctl {
	return &ctl{t: t, bin: procutil.EtcdctlPath(t), endpoint: s.Endpoint}
}

func (c *ctl) env() []string {
	// An operator's own ETCDCTL_* settings (endpoints, certificates) must not
	// leak into the test.
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ETCDCTL_") {
			env = append(env, kv)
		}
	}
	return append(env, "ETCDCTL_API=3")
}

func (c *ctl) command(ctx context.Context, args ...string) *exec.Cmd {
	full := append([]string{"--endpoints=" + c.endpoint, "--command-timeout=20s"}, args...)
	cmd := exec.CommandContext(ctx, c.bin, full...)
	cmd.Env = c.env()
	return cmd
}

// run executes etcdctl with stdin and returns stdout, stderr and the exit
// error.
func (c *ctl) run(stdin string, args ...string) (string, string, error) {
	ctx, cancel := context.WithTimeout(c.t.Context(), 30*time.Second)
	defer cancel()
	cmd := c.command(ctx, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	err := procutil.RunTied(cmd)
	return stdout.String(), stderr.String(), err
}

// ok runs etcdctl, fails the test on a non-zero exit and returns stdout.
func (c *ctl) ok(args ...string) string {
	c.t.Helper()
	return c.okIn("", args...)
}

func (c *ctl) okIn(stdin string, args ...string) string {
	c.t.Helper()
	out, errOut, err := c.run(stdin, args...)
	if err != nil {
		c.t.Fatalf("etcdctl %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, out, errOut)
	}
	return out
}

// expect runs etcdctl and requires its stdout to be exactly want.
func (c *ctl) expect(want string, args ...string) {
	c.t.Helper()
	if got := c.ok(args...); got != want {
		c.t.Errorf("etcdctl %s:\n got %q\nwant %q", strings.Join(args, " "), got, want)
	}
}

// expectIn is expect with stdin.
func (c *ctl) expectIn(want, stdin string, args ...string) {
	c.t.Helper()
	if got := c.okIn(stdin, args...); got != want {
		c.t.Errorf("etcdctl %s with stdin %q:\n got %q\nwant %q", strings.Join(args, " "), stdin, got, want)
	}
}

// expectMatch requires stdout to match the anchored regexp re and returns
// its submatches.
func (c *ctl) expectMatch(re string, args ...string) []string {
	c.t.Helper()
	got := c.ok(args...)
	m := regexp.MustCompile(`\A` + re + `\z`).FindStringSubmatch(got)
	if m == nil {
		c.t.Fatalf("etcdctl %s:\n got %q\nwant match of %q", strings.Join(args, " "), got, re)
	}
	return m
}

// fails runs etcdctl, requires a non-zero exit with wantErr in the "Error:"
// line etcdctl prints, and empty stdout.
func (c *ctl) fails(wantErr string, args ...string) {
	c.t.Helper()
	out, errOut, err := c.run("", args...)
	if err == nil {
		c.t.Errorf("etcdctl %s succeeded, want error %q; stdout %q", strings.Join(args, " "), wantErr, out)
		return
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		c.t.Fatalf("etcdctl %s: %v", strings.Join(args, " "), err)
	}
	if !strings.Contains(errorLines(errOut), wantErr) {
		c.t.Errorf("etcdctl %s: stderr lacks %q:\n%s", strings.Join(args, " "), wantErr, errOut)
	}
}

// errorLines keeps the lines etcdctl prints for the user, dropping the JSON
// log lines of the client library, whose retry warnings also quote the error.
func errorLines(stderr string) string {
	var b strings.Builder
	for _, l := range strings.Split(stderr, "\n") {
		if !strings.HasPrefix(l, "{") {
			b.WriteString(l)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// okJSON runs etcdctl with -w json and decodes stdout into v.
func (c *ctl) okJSON(v any, args ...string) {
	c.t.Helper()
	c.okJSONIn(v, "", args...)
}

func (c *ctl) okJSONIn(v any, stdin string, args ...string) {
	c.t.Helper()
	out := c.okIn(stdin, append(args, "-w", "json")...)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		c.t.Fatalf("etcdctl %s -w json: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// putRev writes key=value through etcdctl and returns the revision the
// server reported for it.
func (c *ctl) putRev(key, value string, extra ...string) int64 {
	c.t.Helper()
	var r struct{ Header jsonHeader }
	c.okJSON(&r, append([]string{"put", key, value}, extra...)...)
	if r.Header.Revision == 0 {
		c.t.Fatalf("put %s: response without revision", key)
	}
	return r.Header.Revision
}

// The JSON shapes below are what etcdctl -w json prints (protobuf messages
// through encoding/json: bytes are base64, int64s are numbers).
type jsonHeader struct {
	ClusterID uint64 `json:"cluster_id"`
	MemberID  uint64 `json:"member_id"`
	Revision  int64  `json:"revision"`
	RaftTerm  uint64 `json:"raft_term"`
}

type jsonKV struct {
	Key            []byte `json:"key"`
	CreateRevision int64  `json:"create_revision"`
	ModRevision    int64  `json:"mod_revision"`
	Version        int64  `json:"version"`
	Value          []byte `json:"value"`
	Lease          int64  `json:"lease"`
}

type jsonRange struct {
	Header jsonHeader `json:"header"`
	KVs    []jsonKV   `json:"kvs"`
	More   bool       `json:"more"`
	Count  int64      `json:"count"`
}

// watcher is a background `etcdctl watch` whose stdout lines are read as
// they arrive.
type watcher struct {
	t     *testing.T
	cmd   *exec.Cmd
	lines chan string
	done  chan struct{}
	mu    sync.Mutex
	err   bytes.Buffer
}

func (c *ctl) watch(args ...string) *watcher {
	c.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &watcher{t: c.t, lines: make(chan string, 1024), done: make(chan struct{})}
	w.cmd = c.command(ctx, append([]string{"watch"}, args...)...)
	w.cmd.Stderr = &lockedWriter{mu: &w.mu, w: &w.err}
	// A plain pipe rather than StdoutPipe: StartTied waits for the process
	// at once, and Wait would close a StdoutPipe under the reader.
	out, pw, err := os.Pipe()
	if err != nil {
		cancel()
		c.t.Fatal(err)
	}
	w.cmd.Stdout = pw
	waited, err := procutil.StartTied(w.cmd)
	_ = pw.Close()
	if err != nil {
		cancel()
		_ = out.Close()
		c.t.Fatal(err)
	}
	go func() {
		defer close(w.done)
		defer close(w.lines)
		defer out.Close()
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			w.lines <- sc.Text()
		}
		<-waited
	}()
	c.t.Cleanup(func() {
		cancel()
		<-w.done
	})
	return w
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (w *watcher) stderr() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err.String()
}

// next returns the next stdout line, failing the test after a timeout or if
// the watch process ended.
func (w *watcher) next() string {
	w.t.Helper()
	select {
	case l, ok := <-w.lines:
		if !ok {
			w.t.Fatalf("etcdctl watch ended early: %v\nstderr:\n%s", w.cmd.ProcessState, w.stderr())
		}
		return l
	case <-time.After(15 * time.Second):
		w.t.Fatalf("etcdctl watch printed nothing for 15s\nstderr:\n%s", w.stderr())
	}
	return ""
}

// nextWithin returns the next stdout line if one arrives within d.
func (w *watcher) nextWithin(d time.Duration) (string, bool) {
	select {
	case l, ok := <-w.lines:
		return l, ok
	case <-time.After(d):
		return "", false
	}
}

// expectLines requires the next len(want) lines to be want.
func (w *watcher) expectLines(want ...string) {
	w.t.Helper()
	var got []string
	for range want {
		got = append(got, w.next())
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		w.t.Fatalf("etcdctl watch printed\n%q\nwant\n%q", got, want)
	}
}

// waitExit waits for the watch process to end on its own and returns its
// remaining stdout.
func (w *watcher) waitExit() []string {
	w.t.Helper()
	var rest []string
	timeout := time.After(15 * time.Second)
	for {
		select {
		case l, ok := <-w.lines:
			if !ok {
				<-w.done
				return rest
			}
			rest = append(rest, l)
		case <-timeout:
			w.t.Fatalf("etcdctl watch did not exit\nstderr:\n%s", w.stderr())
		}
	}
}
