// Command suite runs compiled Go test binaries the way `go test` would (all
// top-level tests of a package in one process, in source order, packages
// side by side) but with a watchdog per top-level test: a test that gets no
// verdict within -timeout is stopped (SIGQUIT first, for a goroutine dump)
// and counted as failed, and the package's remaining tests continue in a new
// process. A crash is handled the same way. So one hanging or crashing test
// fails alone instead of taking the rest of its package down with it.
//
// Usage:
//
//	suite [flags] IMPORTPATH DIR BINARY [IMPORTPATH DIR BINARY ...]
//
// DIR is the package's source directory (the tests' working directory) and
// BINARY its test binary (go test -c). Output of the binary is converted
// with test2json. The exit status is 1 when a test failed or none ran.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

type event struct {
	Time    time.Time `json:",omitempty"`
	Action  string
	Package string  `json:",omitempty"`
	Test    string  `json:",omitempty"`
	Elapsed float64 `json:",omitempty"`
	Output  string  `json:",omitempty"`
}

type pkgInfo struct {
	importPath, dir, binary string
	tests                   []string
}

type counts struct{ pass, fail, skip int }

type pkgResult struct {
	top, sub counts
	failures []string
	wall     float64 // sum of the test processes' run times
	restarts int
}

const (
	maxFailureLines = 80
	maxLooseLines   = 400
	quitGrace       = 10 * time.Second
)

var (
	test2json = flag.String("test2json", "test2json", "path of the test2json tool")
	timeout   = flag.Duration("timeout", 3*time.Minute, "time one top-level test may run without a verdict")
	parallel  = flag.Int("parallel", 4, "-test.parallel of each test process")
	runRE     = flag.String("run", "", "only run top-level tests matching this regexp")
	skipRE    = flag.String("skip", "", "skip top-level tests matching this regexp")
	raw       = flag.String("raw", "", "write every test2json event to this file")
)

// out serializes everything printed and all result bookkeeping.
type out struct {
	mu      sync.Mutex
	raw     io.Writer
	results map[string]*pkgResult
	done    int
	total   int
}

func main() {
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: suite [flags] IMPORTPATH DIR BINARY ...")
		flag.PrintDefaults()
	}
	flag.Parse()
	args := flag.Args()
	if len(args) == 0 || len(args)%3 != 0 {
		flag.Usage()
		os.Exit(2)
	}
	var skip *regexp.Regexp
	if *skipRE != "" {
		skip = regexp.MustCompile(*skipRE)
	}

	o := &out{raw: io.Discard, results: map[string]*pkgResult{}}
	if *raw != "" {
		f, err := os.Create(*raw)
		if err != nil {
			fmt.Fprintln(os.Stderr, "suite:", err)
			os.Exit(2)
		}
		defer f.Close()
		o.raw = f
	}

	var pkgs []*pkgInfo
	for i := 0; i < len(args); i += 3 {
		p := &pkgInfo{importPath: args[i], dir: args[i+1], binary: args[i+2]}
		names, err := listTests(p)
		if err != nil {
			fmt.Fprintf(os.Stderr, "suite: listing tests of %s: %v\n", p.importPath, err)
			os.Exit(1)
		}
		for _, n := range names {
			if skip == nil || !skip.MatchString(n) {
				p.tests = append(p.tests, n)
			}
		}
		pkgs = append(pkgs, p)
		o.results[p.importPath] = &pkgResult{}
		o.total += len(p.tests)
	}

	start := time.Now()
	fmt.Printf("running %d top-level tests in %d packages; a test without a verdict after %v is stopped\n",
		o.total, len(pkgs), *timeout)
	var wg sync.WaitGroup
	for _, p := range pkgs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			remaining := p.tests
			for len(remaining) > 0 {
				remaining = runBatch(o, p, remaining)
				if len(remaining) > 0 {
					o.mu.Lock()
					o.results[p.importPath].restarts++
					fmt.Printf("        %s: restarting for the %d remaining tests\n", short(p.importPath), len(remaining))
					o.mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()

	fmt.Printf("\n=== k8s storage suite summary (top-level tests; subtests in parentheses), %.0fs wall\n", time.Since(start).Seconds())
	failed := false
	var failedNames []string
	for _, p := range pkgs {
		r := o.results[p.importPath]
		status := "PASS"
		if r.top.fail > 0 || r.sub.fail > 0 {
			status, failed = "FAIL", true
		}
		if r.top.pass+r.top.fail+r.top.skip == 0 {
			status, failed = "NONE", true
		}
		extra := ""
		if r.restarts > 0 {
			extra = fmt.Sprintf(", %d restarts", r.restarts)
		}
		fmt.Printf("%-40s %s  passed %3d  failed %3d  skipped %3d   (subtests: passed %d failed %d skipped %d)  %.0fs%s\n",
			p.importPath, status, r.top.pass, r.top.fail, r.top.skip, r.sub.pass, r.sub.fail, r.sub.skip, r.wall, extra)
		for _, t := range r.failures {
			failedNames = append(failedNames, short(p.importPath)+" "+t)
		}
	}
	if len(failedNames) > 0 {
		sort.Strings(failedNames)
		fmt.Println("\nFailed tests:")
		for _, n := range failedNames {
			fmt.Println("  " + n)
		}
	}
	if failed {
		os.Exit(1)
	}
}

// listTests returns the package's top-level tests, examples and fuzz targets
// (run on their seed corpus, as go test does) in source order.
func listTests(p *pkgInfo) ([]string, error) {
	re := *runRE
	if re == "" {
		re = "."
	}
	cmd := exec.Command(p.binary, "-test.list", re)
	cmd.Dir = p.dir
	b, err := cmd.Output()
	if err != nil {
		return nil, err
	}
	var names []string
	for _, n := range strings.Fields(string(b)) {
		if strings.HasPrefix(n, "Test") || strings.HasPrefix(n, "Example") || strings.HasPrefix(n, "Fuzz") {
			names = append(names, n)
		}
	}
	return names, nil
}

// batch is the state of one test process.
type batch struct {
	pkg     *pkgInfo
	started map[string]bool      // top-level tests that got a "run" event
	active  map[string]time.Time // running (not paused) top-level tests, since when
	done    map[string]bool      // top-level tests with a verdict
	events  map[string][]event   // per top-level test, until its verdict
	loose   []string             // output outside any test (panics, dumps)
	lastEv  time.Time
}

func top(test string) string {
	if i := strings.IndexByte(test, '/'); i >= 0 {
		return test[:i]
	}
	return test
}

// runBatch runs tests in one process and returns the tests that never
// started because the process was stopped or crashed first.
func runBatch(o *out, p *pkgInfo, tests []string) []string {
	quoted := make([]string, len(tests))
	for i, t := range tests {
		quoted[i] = regexp.QuoteMeta(t)
	}
	bin := exec.Command(p.binary, "-test.v=test2json", "-test.count=1", "-test.timeout=0",
		"-test.parallel", fmt.Sprint(*parallel), "-test.run", "^("+strings.Join(quoted, "|")+")$")
	bin.Dir = p.dir
	// Own process group, so a stuck binary and the servers it started can
	// be killed together.
	bin.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	conv := exec.Command(*test2json, "-t", "-p", p.importPath)
	pr, pw, err := os.Pipe()
	if err != nil {
		panic(err)
	}
	bin.Stdout, bin.Stderr, conv.Stdin = pw, pw, pr
	convOut, err := conv.StdoutPipe()
	if err != nil {
		panic(err)
	}
	conv.Stderr = os.Stderr
	if err := conv.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "suite: starting test2json:", err)
		os.Exit(1)
	}
	began := time.Now()
	binErr := bin.Start()
	pw.Close()
	pr.Close()
	if binErr != nil {
		fmt.Fprintln(os.Stderr, "suite: starting", p.binary+":", binErr)
		os.Exit(1)
	}
	exited := make(chan error, 1)
	go func() { exited <- bin.Wait() }()

	evc := make(chan event)
	go func() {
		defer close(evc)
		sc := bufio.NewScanner(convOut)
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		for sc.Scan() {
			var e event
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Action == "" {
				e = event{Time: time.Now(), Action: "output", Package: p.importPath, Output: sc.Text() + "\n"}
			}
			evc <- e
		}
	}()

	b := &batch{pkg: p, started: map[string]bool{}, active: map[string]time.Time{},
		done: map[string]bool{}, events: map[string][]event{}, lastEv: time.Now()}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var stopReason string
	var quitAt time.Time
	var binExit error
	binDone := false
	for evc != nil {
		select {
		case e, ok := <-evc:
			if !ok {
				evc = nil
				continue
			}
			b.handle(o, e)
		case binExit = <-exited:
			binDone = true
		case now := <-tick.C:
			if stopReason == "" {
				for name, since := range b.active {
					if now.Sub(since) > *timeout {
						stopReason = fmt.Sprintf("%s got no verdict within %v: test process stopped (SIGQUIT, goroutine dump above)", name, *timeout)
					}
				}
				if len(b.active) == 0 && now.Sub(b.lastEv) > *timeout {
					stopReason = fmt.Sprintf("test process silent for %v outside any running test: stopped", *timeout)
				}
				if stopReason != "" {
					quitAt = now
					_ = bin.Process.Signal(syscall.SIGQUIT)
				}
			} else if !binDone && now.Sub(quitAt) > quitGrace {
				_ = syscall.Kill(-bin.Process.Pid, syscall.SIGKILL)
			}
		}
	}
	if !binDone {
		binExit = <-exited
	}
	_ = conv.Wait()
	// Servers the tests started die with the test binary (Pdeathsig); make
	// sure of it for anything else left in its process group.
	_ = syscall.Kill(-bin.Process.Pid, syscall.SIGKILL)

	o.mu.Lock()
	defer o.mu.Unlock()
	o.results[p.importPath].wall += time.Since(began).Seconds()
	var remaining []string
	progressed := false
	for _, t := range tests {
		switch {
		case b.done[t]:
			progressed = true
		case b.started[t]:
			progressed = true
			why := stopReason
			if why == "" {
				why = "test process ended without a verdict for this test"
				if binExit != nil {
					why += ": " + binExit.Error()
				}
			}
			b.synthesizeFail(o, t, why)
		default:
			remaining = append(remaining, t)
		}
	}
	if !progressed && len(remaining) > 0 {
		// The process died before running anything: do not loop.
		why := "test process ended before running this test"
		if binExit != nil {
			why += ": " + binExit.Error()
		}
		for _, t := range remaining {
			b.synthesizeFail(o, t, why)
		}
		return nil
	}
	return remaining
}

func (b *batch) handle(o *out, e event) {
	b.lastEv = time.Now()
	o.mu.Lock()
	writeRaw(o, e)
	o.mu.Unlock()
	if e.Test == "" {
		if e.Action == "output" {
			b.loose = append(b.loose, e.Output)
			if len(b.loose) > maxLooseLines {
				b.loose = b.loose[len(b.loose)-maxLooseLines:]
			}
		}
		return
	}
	t := top(e.Test)
	b.events[t] = append(b.events[t], e)
	if e.Test != t {
		return
	}
	switch e.Action {
	case "run":
		b.started[t] = true
		b.active[t] = time.Now()
	case "cont":
		b.active[t] = time.Now()
	case "pause":
		delete(b.active, t)
	case "pass", "fail", "skip":
		delete(b.active, t)
		b.done[t] = true
		o.mu.Lock()
		report(o, b.pkg, t, b.events[t])
		o.mu.Unlock()
		delete(b.events, t)
	}
}

// synthesizeFail gives a test that never got a verdict a failure carrying the
// process's last words. o.mu must be held.
func (b *batch) synthesizeFail(o *out, t, why string) {
	now := time.Now()
	evs := b.events[t]
	for _, l := range b.loose {
		evs = append(evs, event{Time: now, Action: "output", Package: b.pkg.importPath, Test: t, Output: l})
	}
	evs = append(evs, event{Time: now, Action: "output", Package: b.pkg.importPath, Test: t, Output: why + "\n"})
	// Running subtests of t are failed along with it.
	seen := map[string]bool{}
	for _, e := range b.events[t] {
		switch e.Action {
		case "run":
			seen[e.Test] = true
		case "pass", "fail", "skip":
			delete(seen, e.Test)
		}
	}
	delete(seen, t)
	var subs []string
	for s := range seen {
		subs = append(subs, s)
	}
	sort.Sort(sort.Reverse(sort.StringSlice(subs))) // children before parents
	for _, s := range subs {
		evs = append(evs, event{Time: now, Action: "fail", Package: b.pkg.importPath, Test: s})
	}
	evs = append(evs, event{Time: now, Action: "fail", Package: b.pkg.importPath, Test: t})
	for _, e := range evs[len(b.events[t]):] {
		writeRaw(o, e)
	}
	report(o, b.pkg, t, evs)
	delete(b.events, t)
	b.done[t] = true
}

func writeRaw(o *out, e event) {
	line, _ := json.Marshal(e)
	o.raw.Write(append(line, '\n'))
}

// report counts the verdicts of one finished top-level test and prints it.
// o.mu must be held.
func report(o *out, p *pkgInfo, t string, evs []event) {
	r := o.results[p.importPath]
	o.done++
	outs := map[string][]string{}
	verdict, elapsed := "?", 0.0
	var failed []string
	for _, e := range evs {
		switch e.Action {
		case "output":
			outs[e.Test] = append(outs[e.Test], e.Output)
		case "pass", "fail", "skip":
			c := &r.top
			if e.Test != t {
				c = &r.sub
			}
			switch e.Action {
			case "pass":
				c.pass++
			case "skip":
				c.skip++
			case "fail":
				c.fail++
				r.failures = append(r.failures, e.Test)
				failed = append(failed, e.Test)
			}
			if e.Test == t {
				verdict, elapsed = strings.ToUpper(e.Action), e.Elapsed
			}
		}
	}
	fmt.Printf("[%3d/%d] %-4s %s %s (%.1fs)\n", o.done, o.total, verdict, short(p.importPath), t, elapsed)
	// Failed subtests carry the messages; the parent's own output (server
	// log notes, last words of a crash) comes last.
	for _, f := range failed {
		fmt.Printf("    === FAIL %s %s\n", short(p.importPath), f)
		printLines("    | ", outs[f], maxFailureLines)
	}
}

func short(pkg string) string {
	return strings.TrimPrefix(pkg, "k8s.io/apiserver/pkg/storage/")
}

// printLines prints out, keeping the start (first errors) and the end (final
// verdicts) when it is longer than max lines.
func printLines(prefix string, out []string, max int) {
	text := strings.TrimRight(strings.Join(out, ""), "\n")
	if text == "" {
		return
	}
	lines := strings.Split(text, "\n")
	if len(lines) > max {
		omitted := fmt.Sprintf("... (%d lines omitted)", len(lines)-max)
		lines = append(append(append([]string{}, lines[:max/2]...), omitted), lines[len(lines)-max/2:]...)
	}
	for _, l := range lines {
		fmt.Println(prefix + l)
	}
}
