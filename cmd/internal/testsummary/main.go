// Command testsummary reads `go test -json` on stdin, writes what plain
// `go test` would (each package's result line, and the output of failed
// tests), then closes with one line per reason a test was skipped: the
// tests that skip for a missing tool or missing weights say so there,
// instead of only under -v. .ci/test runs it; it exits 1 when a test or
// a build failed.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action     string
	Package    string
	ImportPath string // build-output, build-fail
	Test       string
	Output     string
}

func main() {
	failed, err := run(os.Stdin, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		os.Exit(2)
	}
	if failed {
		os.Exit(1)
	}
}

// run copies in's results to out and writes the summary of skips; failed
// is whether a test, package or build failed.
func run(in io.Reader, out io.Writer) (failed bool, err error) {
	type key struct{ pkg, test string }
	outputs := map[key][]string{}
	skips := map[string][]string{} // reason: "pkg.Test" …
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if json.Unmarshal(line, &e) != nil || e.Action == "" {
			fmt.Fprintf(out, "%s\n", line) // not test2json: pass it on
			continue
		}
		k := key{e.Package, e.Test}
		switch e.Action {
		case "build-output":
			fmt.Fprint(out, e.Output)
		case "build-fail":
			failed = true
		case "output":
			if e.Test == "" {
				if !strings.HasPrefix(e.Output, "=== ") && !strings.HasPrefix(e.Output, "PASS\n") {
					fmt.Fprint(out, e.Output) // ok/FAIL lines, panics, TestMain's own output
				}
				continue
			}
			outputs[k] = append(outputs[k], e.Output)
		case "fail":
			if e.Test == "" {
				failed = true
				continue
			}
			failed = true
			for _, o := range outputs[k] {
				if !strings.HasPrefix(o, "=== ") {
					fmt.Fprint(out, o)
				}
			}
			delete(outputs, k)
		case "skip":
			if e.Test != "" {
				r := skipReason(outputs[k])
				skips[r] = append(skips[r], shortPkg(e.Package)+"."+e.Test)
			}
			delete(outputs, k)
		case "pass":
			delete(outputs, k)
		}
	}
	if err := sc.Err(); err != nil {
		return failed, err
	}
	writeSkips(out, skips)
	return failed, nil
}

// location is the file:line a test's log line starts with.
var location = regexp.MustCompile(`^\s*[\w.-]+\.go:\d+: `)

// skipReason is what a skipped test said, without its file:line; the
// runner's own lines (=== RUN, --- SKIP) are left out.
func skipReason(lines []string) string {
	var said []string
	for _, l := range lines {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- ") {
			continue
		}
		said = append(said, strings.TrimSpace(location.ReplaceAllString(l, "")))
	}
	if len(said) == 0 {
		return "(no reason given)"
	}
	return strings.Join(said, " / ")
}

func shortPkg(p string) string {
	return strings.TrimPrefix(p, "github.com/streamgate/streamgate/")
}

// writeSkips writes the summary: a count, then each reason with the
// tests it skipped, the most common first.
func writeSkips(out io.Writer, skips map[string][]string) {
	n := 0
	reasons := make([]string, 0, len(skips))
	for r, ts := range skips {
		n += len(ts)
		reasons = append(reasons, r)
	}
	if n == 0 {
		fmt.Fprintln(out, "no test skipped")
		return
	}
	sort.Slice(reasons, func(i, j int) bool {
		a, b := skips[reasons[i]], skips[reasons[j]]
		if len(a) != len(b) {
			return len(a) > len(b)
		}
		return reasons[i] < reasons[j]
	})
	fmt.Fprintf(out, "%d tests skipped, for %d reasons (set STREAMGATE_REQUIRE=1 as .ci/run does to make a missing tool fail instead):\n", n, len(reasons))
	for _, r := range reasons {
		ts := skips[r]
		sort.Strings(ts)
		names := strings.Join(ts, ", ")
		if len(ts) > 4 {
			names = strings.Join(ts[:4], ", ") + fmt.Sprintf(" and %d more", len(ts)-4)
		}
		fmt.Fprintf(out, "  %3d  %s\n       (%s)\n", len(ts), r, names)
	}
}
