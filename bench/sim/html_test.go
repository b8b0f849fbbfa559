package sim_test

import (
	"bytes"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/bench/sim"
	"github.com/lbkit/lbkit/catalog"
)

// The HTML report says first what the tables say (the pick, then every
// scenario's leaders), compares the algorithms side by side on shared
// scales, marks the outage, states its binning, puts values in hover
// titles and errors on a chart of their own, and loads nothing from
// elsewhere.
func TestHTML(t *testing.T) {
	failure := scenario(t, "failure").Scale(0.1)
	failure.Variants = []sim.Variant{sim.None, sim.Active | sim.Passive | sim.Retry}
	rep, err := sim.Run([]sim.Scenario{scenario(t, "steady").Scale(0.1), failure},
		[]catalog.Algorithm{algo(t, "rr"), algo(t, "leastconn"), algo(t, "lrt")}, sim.Options{Seed: 1})
	require.NoError(t, err)
	var buf bytes.Buffer
	require.NoError(t, rep.WriteHTML(&buf))
	page := buf.String()

	for _, external := range []string{"<script", "src=", "<link", `href="http`, "url(", "@import"} {
		assert.NotContains(t, page, external, "self-contained")
	}
	pick := rep.Summaries()[0].Standings[0].Algorithm
	first := strings.Index(page, "<section")
	require.Positive(t, first)
	top := page[:first]
	assert.Contains(t, top, `<p class="pick">use `+pick+`: `, "the pick comes first")
	assert.Contains(t, top, "Every scenario at a glance")
	for _, sr := range rep.Scenarios {
		v := sr.Verdict()
		assert.Contains(t, top, v.Leads[0].Algorithms[0]+", ", "%s's throughput leader at the top", sr.Scenario.Name)
	}

	sections := strings.Split(page[first:], "<section")[1:]
	require.Len(t, sections, 2)
	for i, sec := range sections {
		sr := rep.Scenarios[i]
		assert.Contains(t, sec, "<h3>Side by side</h3>")
		assert.Contains(t, sec, "Throughput (more is better)")
		assert.Contains(t, sec, "p99 ms (less is better)")
		assert.Regexp(t, `<title>(\S+ / )?`+sr.Results[0].Algorithm+`: [0-9.]+ RPS</title>`, sec, "hover values on the bars")
		assert.Regexp(t, `Each point is one \S+ bin \(\d+ bins over `, sec, "binning stated")
		assert.Contains(t, sec, "the faint line the bin's peak")
		// Shared scales: every in-flight chart of the section has the
		// same top tick.
		tops := map[string]bool{}
		for _, chart := range strings.Split(sec, `aria-label="requests in flight"`)[1:] {
			chart = chart[:strings.Index(chart, "</svg>")]
			labels := regexp.MustCompile(`text-anchor="end">([0-9.k]+)</text>`).FindAllStringSubmatch(chart, -1)
			require.NotEmpty(t, labels)
			tops[labels[len(labels)-1][1]] = true
		}
		assert.Len(t, tops, 1, "%s: one scale for every in-flight chart: %v", sr.Scenario.Name, tops)
	}
	steady, fail := sections[0], sections[1]
	assert.NotContains(t, steady, "down</text>", "no outage in steady")
	assert.NotContains(t, steady, "failed user requests/s", "no errors, no error chart")
	assert.Contains(t, fail, "50ms down</text>", "the outage is marked and named")
	assert.Contains(t, fail, "down from 6s, for good</title>")
	assert.Contains(t, fail, `aria-label="failed user requests/s"`, "errors on a chart of their own")
	assert.Contains(t, fail, "<details open><summary>active+passive+retry</summary>", "the judged variant open")
	assert.Contains(t, fail, "<details><summary>none</summary>")
	assert.Regexp(t, `<title>\d+(\.\d+)?s–\d+(\.\d+)?s\n50ms: [0-9.]+ \(peak \d+\)`, fail, "hover: the bin's values")
}

// A neighbour is shaded and named on the charts, as an outage is, and the
// load scenario's verdict line reaches the page.
func TestHTMLNeighbour(t *testing.T) {
	sc := sim.LoadScenarios()[1].Scale(0.1) // antagonist-95
	rep, err := sim.Run([]sim.Scenario{sc}, []catalog.Algorithm{algo(t, "lrt"), algo(t, "prequal")}, sim.Options{Seed: 1})
	require.NoError(t, err)
	var buf bytes.Buffer
	require.NoError(t, rep.WriteHTML(&buf))
	page := buf.String()
	assert.Contains(t, page, "<title>a neighbour takes 8 of 50ms#1&#39;s 16 slots from 6s, for good</title>")
	assert.Contains(t, page, ">50ms#1 neighbour</text>")
	assert.Contains(t, page, "report-driven or probing against local: prequal&#39;s p99 is ")
}

// With more backends than the tables list, the charts draw a line per
// zone, or one for all, and mark the backends that die together once:
// the zones and fleet scenarios' pages stay small.
func TestHTMLManyBackends(t *testing.T) {
	var scs []sim.Scenario
	for _, s := range sim.FleetScenarios() {
		scs = append(scs, s.Scale(0.05))
	}
	rep, err := sim.Run(scs, []catalog.Algorithm{algo(t, "rr")}, sim.Options{Seed: 1})
	require.NoError(t, err)
	var buf bytes.Buffer
	require.NoError(t, rep.WriteHTML(&buf))
	page := buf.String()
	sections := strings.Split(page, "<section")[1:]
	require.Len(t, sections, 2)
	zones, fleet := sections[0], sections[1]
	for _, want := range []string{"zone a, 14 backends", "zone b, 10 backends", "zone c, 6 backends", "7 backends down</text>",
		"With 30 backends, each line is a group of them"} {
		assert.Contains(t, zones, want)
	}
	chart := strings.Split(zones, `aria-label="requests in flight"`)[1]
	assert.Equal(t, 1, strings.Count(chart[:strings.Index(chart, "</svg>")], "down</text>"), "one mark for the seven")
	assert.Contains(t, fleet, "all 300 backends")
	assert.Regexp(t, `\nall 300 backends: [0-9.]+ \(peak \d+\)`, fleet, "hover: the group's values")
	assert.Less(t, len(page), 400_000, "a line per group, not per backend")
}
