package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

//go:generate go test -run TestResultsFile -write

// write makes TestResultsFile write docs/results.md instead of comparing.
var write = flag.Bool("write", false, "TestResultsFile: write docs/results.md from lbsim's output instead of comparing")

// resultsPath is docs/results.md, from this package's directory.
var resultsPath = filepath.Join("..", "..", "..", "docs", "results.md")

// regenerate is the command that rewrites docs/results.md, from the
// repository's root.
const regenerate = "go test ./bench/cmd/lbsim -run TestResultsFile -write"

// resultSections are docs/results.md's sections: a title, what the
// section is for, and the lbsim flags that print it.
var resultSections = []struct {
	title, about string
	args         []string
}{
	{
		"The study's scenarios",
		"Four backends at 50/150/300/500 ms (weights 6:3:2:1 for wrr), closed-loop users who wait 100 ms between requests: " +
			"steady (100 users for 3 minutes), burst (10 to 250 users and back), failure (the 50 ms backend dies at 1 minute, " +
			"under four ways of handling it), and the same three with 16 requests served at once per backend (-cap); " +
			"behind one balancer and behind 10 that split the users.",
		[]string{"-markdown", "-seed", "1", "-proxies", "1,10"},
	},
	{
		"Load reports and probes",
		"Four backends serving in 50 ms that report their load and answer probes as lbhttp.Reporter does: 16 slots each with a " +
			"neighbour the proxies cannot see taking 8 of one's from the first minute on (antagonist), or 32, 16, 8 and 4 slots " +
			"(hetero), at 70% and 95% of the slots; with the pickers that weigh reports and probes.",
		[]string{"-markdown", "-seed", "1", "-scenarios", "antagonist,hetero", "-proxies", "1,10"},
	},
	{
		"Slow backends: timeouts, the retry budget, hedging",
		"The study's backends with one that accepts and never answers from the first minute (stall), all of them answering " +
			"503 for 30 s (storm), and 1% of each one's requests 20 times slower (tail), through lbhttp's Budget and Percentile " +
			"in virtual time, with lbhttp's defaults and without them.",
		[]string{"-markdown", "-seed", "1", "-scenarios", "stall,storm,tail"},
	},
	{
		"A flaky backend and a canary",
		"The study's backends with the 50 ms one answering 30% of its requests with a fast 503 (flaky), under health " +
			"without retries and with them; and four backends serving in 50 ms, 16 at once, beside a canary three times " +
			"slower (canary), in the pool (none), behind package route sent nothing (route) and sent 5% of the requests " +
			"(route+canary).",
		[]string{"-markdown", "-seed", "1", "-scenarios", "flaky,canary"},
	},
	{
		"Fleets: zones and subsets",
		"zones: three zones of 14, 10 and 6 backends serving in about 10 ms, 4 requests at once, 10 proxies spread 5/3/2, " +
			"2 ms more across zones, zone a losing 7 of its backends at 1 minute; zone-blind against locality. " +
			"fleet: 100 proxies of 10 users each in front of 300 such backends, all-to-all against subsets of 20.",
		[]string{"-markdown", "-seed", "1", "-scenarios", "zones,fleet"},
	},
}

// resultsHeader opens docs/results.md.
func resultsHeader() string {
	var b strings.Builder
	b.WriteString("# lbsim's results at seed 1\n\n")
	b.WriteString("<!-- Generated: do not edit. " + regenerate + " rewrites this file. -->\n\n")
	b.WriteString("What the scenario simulator measured of every lbkit algorithm. The package docs say what each\n" +
		"algorithm and decorator does and costs; the figures live here, where a change that moves one\n" +
		"cannot leave a stale copy behind. lbsim plays in virtual time, with the real pickers and the real\n" +
		"health package driven through their clock and random seams: the same seed prints the same bytes\n" +
		"on every machine and every run, so this file is exact.\n\n")
	b.WriteString("Each section is the output of the lbsim command above it, run from the repository's root:\n\n")
	for _, s := range resultSections {
		fmt.Fprintf(&b, "- [%s](#%s): `%s`\n", s.title, anchor(s.title), command(s.args))
	}
	b.WriteString("\n`" + regenerate + "` (or `go generate ./bench/cmd/lbsim`) runs them and writes this\n" +
		"file; `go test ./bench/cmd/lbsim` (TestResultsFile, without -race) fails when lbsim's output\n" +
		"differs from it. How to read the tables: `go doc ./bench/sim`.\n")
	return b.String()
}

// command is the lbsim command line that prints args.
func command(args []string) string {
	return "go run ./bench/cmd/lbsim " + strings.Join(args, " ")
}

// anchor is the fragment GitHub gives a Markdown heading.
func anchor(title string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(title) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			b.WriteRune(r)
		}
	}
	return b.String()
}

// results returns docs/results.md as lbsim prints it today.
func results(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	b.WriteString(resultsHeader())
	for _, s := range resultSections {
		var out, errs bytes.Buffer
		code := run(context.Background(), s.args, &out, &errs)
		require.Equal(t, 0, code, "%s: %s", command(s.args), errs.String())
		fmt.Fprintf(&b, "\n## %s\n\n%s\n\n`%s`\n\n", s.title, s.about, command(s.args))
		b.WriteString(out.String())
	}
	return b.String()
}

// TestResultsFile keeps docs/results.md true: it regenerates the file
// from lbsim's output, seed 1, and fails on any difference, naming the
// first line that differs and the command that rewrites the file. The
// simulation plays in virtual time, so the comparison is exact.
//
// Under -race the regeneration takes minutes of CPU (the simulator runs
// many times slower), so there the test checks what it can without
// simulating: the file's header and sections name exactly these commands,
// and each command parses. .ci/test runs the full comparison in its pass
// without -race.
func TestResultsFile(t *testing.T) {
	if *write {
		require.NoError(t, os.WriteFile(resultsPath, []byte(results(t)), 0o644))
		t.Logf("wrote %s", resultsPath)
		return
	}
	file, err := os.ReadFile(resultsPath)
	require.NoError(t, err, "docs/results.md is missing; write it with %s", regenerate)
	have := string(file)
	if raceEnabled {
		assert.True(t, strings.HasPrefix(have, resultsHeader()),
			"docs/results.md's header does not name the commands this test runs; rewrite it with %s", regenerate)
		for _, s := range resultSections {
			_, err := parse(s.args, &bytes.Buffer{})
			assert.NoError(t, err, command(s.args))
			assert.Contains(t, have, "\n## "+s.title+"\n", "docs/results.md has no section %q; rewrite it with %s", s.title, regenerate)
		}
		t.Logf("under -race: header and commands checked; the figures are compared without -race (.ci/test's second pass)")
		return
	}
	want := results(t)
	if have == want {
		return
	}
	haveLines, wantLines := strings.Split(have, "\n"), strings.Split(want, "\n")
	i := 0
	for i < len(haveLines) && i < len(wantLines) && haveLines[i] == wantLines[i] {
		i++
	}
	line := func(ls []string) string {
		if i < len(ls) {
			return ls[i]
		}
		return "(end of file)"
	}
	t.Errorf("docs/results.md differs from what lbsim prints today, first at line %d:\n  file:  %s\n  lbsim: %s\n"+
		"(%d lines in the file, %d printed). If the change is meant, rewrite the file, from the repository's root:\n  %s",
		i+1, line(haveLines), line(wantLines), len(haveLines), len(wantLines), regenerate)
}
