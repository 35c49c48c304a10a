// Command summary reads a `go test -json` stream on stdin and prints, per
// package, how many tests passed, failed and were skipped (top-level tests
// and subtests counted separately), the output of every failed test and a
// final list of failures. It exits 1 when anything failed, a package did not
// build, or no test ran at all.
//
// Usage: go test -json ... | summary [-raw FILE] [-v]
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"
)

type event struct {
	Time       time.Time
	Action     string
	Package    string
	ImportPath string
	Test       string
	Elapsed    float64
	Output     string
}

type counts struct{ pass, fail, skip int }

type pkgState struct {
	name     string
	top, sub counts
	result   string // pass, fail, skip or "" while running
	elapsed  float64
	output   []string // output not attributed to a test
	started  time.Time
	failures []string
}

const maxFailureLines = 80

func main() {
	raw := flag.String("raw", "", "also write the raw JSON stream to this file")
	verbose := flag.Bool("v", false, "print a line for every finished top-level test")
	flag.Parse()

	var rawOut io.Writer = io.Discard
	if *raw != "" {
		f, err := os.Create(*raw)
		if err != nil {
			fmt.Fprintln(os.Stderr, "summary:", err)
			os.Exit(2)
		}
		defer f.Close()
		rawOut = f
	}

	pkgs := map[string]*pkgState{}
	var order []string
	pkg := func(name string) *pkgState {
		p, ok := pkgs[name]
		if !ok {
			p = &pkgState{name: name}
			pkgs[name] = p
			order = append(order, name)
		}
		return p
	}
	testOut := map[string][]string{} // "pkg\x00test" -> output lines
	buildOut := map[string][]string{}
	buildFailed := map[string]bool{}

	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		fmt.Fprintf(rawOut, "%s\n", line)
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			fmt.Println(string(line)) // e.g. "go: downloading ..." or build errors
			continue
		}
		switch e.Action {
		case "build-output":
			buildOut[e.ImportPath] = append(buildOut[e.ImportPath], e.Output)
			continue
		case "build-fail":
			buildFailed[e.ImportPath] = true
			continue
		}
		if e.Package == "" {
			continue
		}
		p := pkg(e.Package)
		key := e.Package + "\x00" + e.Test
		switch e.Action {
		case "start":
			p.started = e.Time
		case "output":
			if e.Test == "" {
				p.output = append(p.output, e.Output)
			} else {
				testOut[key] = append(testOut[key], e.Output)
			}
		case "pass", "fail", "skip":
			if e.Test == "" {
				p.result, p.elapsed = e.Action, e.Elapsed
				fmt.Printf("--- %s %s (%.1fs): %s\n", strings.ToUpper(e.Action), p.name, e.Elapsed, line1(p))
				continue
			}
			c := &p.top
			if strings.Contains(e.Test, "/") {
				c = &p.sub
			}
			switch e.Action {
			case "pass":
				c.pass++
			case "skip":
				c.skip++
			case "fail":
				c.fail++
				p.failures = append(p.failures, e.Test)
				printFailure(e.Package, e.Test, testOut[key])
			}
			if *verbose && !strings.Contains(e.Test, "/") {
				fmt.Printf("    %-4s %s %s (%.2fs)\n", strings.ToUpper(e.Action), short(e.Package), e.Test, e.Elapsed)
			}
			if e.Action != "fail" {
				delete(testOut, key)
			}
		}
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "summary: reading input:", err)
	}

	bad := false
	fmt.Println()
	fmt.Println("=== k8s storage suite summary (top-level tests; subtests in parentheses)")
	for _, name := range order {
		p := pkgs[name]
		status := p.result
		switch {
		case buildFailed[name] || (status == "fail" && p.top.pass+p.top.fail+p.top.skip == 0):
			status = "FAIL (no tests ran)"
			bad = true
		case status == "":
			status = "INCOMPLETE"
			bad = true
		case status == "fail":
			status = "FAIL"
			bad = true
		default:
			status = strings.ToUpper(status)
		}
		fmt.Printf("%-45s %-4s passed %3d failed %3d skipped %3d   (subtests: passed %d failed %d skipped %d)  %.0fs\n",
			name, status, p.top.pass, p.top.fail, p.top.skip, p.sub.pass, p.sub.fail, p.sub.skip, p.elapsed)
		if p.result == "fail" && p.top.fail == 0 || p.result == "" {
			// Crash, timeout or build failure: show what the package printed.
			printLines("    | ", append(buildOut[name], p.output...), maxFailureLines)
		}
	}
	for name := range buildFailed {
		if _, ok := pkgs[name]; !ok {
			fmt.Printf("%-45s FAIL (build failed)\n", name)
			printLines("    | ", buildOut[name], maxFailureLines)
			bad = true
		}
	}
	if len(order) == 0 {
		fmt.Println("no test packages ran")
		bad = true
	}
	var failed []string
	for _, name := range order {
		for _, t := range pkgs[name].failures {
			failed = append(failed, short(name)+" "+t)
		}
	}
	sort.Strings(failed)
	if len(failed) > 0 {
		fmt.Println("\nFailed tests:")
		for _, f := range failed {
			fmt.Println("  " + f)
		}
	}
	if bad || len(failed) > 0 {
		os.Exit(1)
	}
}

func line1(p *pkgState) string {
	return fmt.Sprintf("%d passed, %d failed, %d skipped", p.top.pass, p.top.fail, p.top.skip)
}

func short(pkg string) string {
	return strings.TrimPrefix(pkg, "k8s.io/apiserver/pkg/storage/")
}

func printFailure(pkg, test string, out []string) {
	fmt.Printf("=== FAIL %s %s\n", short(pkg), test)
	printLines("    | ", out, maxFailureLines)
}

func printLines(prefix string, out []string, max int) {
	text := strings.Join(out, "")
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	if len(lines) > max {
		// Keep the start (first errors) and the end (final verdicts).
		head, rest := lines[:max/2], lines[len(lines)-max/2:]
		omitted := fmt.Sprintf("... (%d lines omitted)", len(lines)-max)
		lines = append(append(head[:len(head):len(head)], omitted), rest...)
	}
	for _, l := range lines {
		if l != "" {
			fmt.Println(prefix + l)
		}
	}
}
