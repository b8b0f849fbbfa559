package sim_test

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/bench/sim"
	"github.com/lbkit/lbkit/catalog"
)

// exported is a report of two scenarios, one with an outage and two
// variants, for two numbers of proxies.
func exported(t *testing.T) *sim.Report {
	t.Helper()
	failure := scenario(t, "failure").Scale(0.05)
	failure.Variants = []sim.Variant{sim.None, sim.Active | sim.Passive | sim.Retry}
	rep, err := sim.Run([]sim.Scenario{scenario(t, "steady-cap").Scale(0.05), failure},
		[]catalog.Algorithm{algo(t, "rr"), algo(t, "lrt")}, sim.Options{Seed: 3, Proxies: []int{1, 2}})
	require.NoError(t, err)
	return rep
}

// -json reads back: every figure of every run as the report holds it, the
// series behind the charts, the scenario as run, the verdict and the
// summaries, with the command and flags that made them.
func TestWriteJSON(t *testing.T) {
	rep := exported(t)
	doc := sim.Document{Command: []string{"lbsim", "-seed", "3"}, Flags: map[string]string{"seed": "3"}, Reports: []*sim.Report{rep}}
	var buf bytes.Buffer
	require.NoError(t, doc.WriteJSON(&buf))

	var got struct {
		Format  string            `json:"format"`
		Command []string          `json:"command"`
		Flags   map[string]string `json:"flags"`
		Reports []struct {
			Source    string `json:"source"`
			Seed      uint64 `json:"seed"`
			Scenarios []struct {
				Name     string `json:"name"`
				Proxies  int    `json:"proxies"`
				Backends []struct {
					Label     string  `json:"label"`
					ID        string  `json:"id"`
					LatencyMS float64 `json:"latency_ms"`
					Capacity  int     `json:"capacity"`
				} `json:"backends"`
				Metrics []struct {
					Name   string `json:"name"`
					Better string `json:"better"`
				} `json:"metrics"`
				Results []struct {
					Variant   string              `json:"variant"`
					Algorithm string              `json:"algorithm"`
					Figures   map[string]*float64 `json:"figures"`
					Backends  []struct {
						Sent         int64   `json:"sent"`
						SharePct     float64 `json:"share_pct"`
						InFlightPeak int     `json:"in_flight_peak"`
					} `json:"backends"`
					Series struct {
						StepS        float64     `json:"step_s"`
						Users        []int       `json:"users"`
						InFlight     [][]float64 `json:"in_flight"`
						InFlightPeak [][]int     `json:"in_flight_peak"`
						ErrorsPerS   []float64   `json:"errors_per_s"`
					} `json:"series"`
				} `json:"results"`
				Verdict struct {
					Variant string   `json:"variant"`
					Lines   []string `json:"lines"`
				} `json:"verdict"`
			} `json:"scenarios"`
			Summaries []struct {
				Proxies int      `json:"proxies"`
				Lines   []string `json:"lines"`
			} `json:"summaries"`
		} `json:"reports"`
	}
	require.NoError(t, json.Unmarshal(buf.Bytes(), &got))
	assert.Equal(t, sim.Format, got.Format)
	assert.Equal(t, doc.Command, got.Command)
	assert.Equal(t, doc.Flags, got.Flags)
	require.Len(t, got.Reports, 1)
	jr := got.Reports[0]
	assert.Equal(t, "simulation", jr.Source)
	assert.Equal(t, uint64(3), jr.Seed)
	require.Len(t, jr.Scenarios, len(rep.Scenarios))
	for i, sr := range rep.Scenarios {
		js := jr.Scenarios[i]
		assert.Equal(t, sr.Scenario.Name, js.Name)
		assert.Equal(t, sr.Proxies, js.Proxies)
		require.Len(t, js.Backends, len(sr.Scenario.Backends))
		assert.Equal(t, sr.Scenario.ID(0), js.Backends[0].ID)
		assert.Equal(t, sr.Scenario.Backends[0].Capacity, js.Backends[0].Capacity)
		assert.Equal(t, sr.Scenario.Backends[0].Latency.Seconds()*1000, js.Backends[0].LatencyMS)
		v := sr.Verdict()
		assert.Equal(t, v.Variant.String(), js.Verdict.Variant)
		assert.NotEmpty(t, js.Verdict.Lines)
		require.Len(t, js.Results, len(sr.Results))
		for j, r := range sr.Results {
			jres := js.Results[j]
			assert.Equal(t, r.Algorithm, jres.Algorithm)
			assert.Equal(t, r.Variant.String(), jres.Variant)
			for _, m := range sr.Metrics() {
				want, _ := m.Value(&r)
				require.NotNil(t, jres.Figures[m.Name], "%s: figure %s", r.Algorithm, m.Name)
				assert.Equal(t, want, *jres.Figures[m.Name], "%s: figure %s", r.Algorithm, m.Name)
			}
			assert.Equal(t, float64(r.P99)/float64(time.Millisecond), *jres.Figures["p99_ms"])
			_, hasChange := jres.Figures["change_pct"]
			assert.Equal(t, r.Failure != nil, hasChange, "failure figures only with an outage")
			for k, b := range r.Backends {
				assert.Equal(t, b.Sent, jres.Backends[k].Sent)
				assert.Equal(t, b.PeakInFlight, jres.Backends[k].InFlightPeak)
			}
			assert.Equal(t, r.Series.Step.Seconds(), jres.Series.StepS)
			assert.Equal(t, r.Series.Users, jres.Series.Users)
			assert.Equal(t, r.Series.InFlight, jres.Series.InFlight)
			assert.Equal(t, r.Series.PeakInFlight, jres.Series.InFlightPeak)
			assert.Equal(t, r.Series.Errors, jres.Series.ErrorsPerS)
		}
	}
	ss := rep.Summaries()
	require.Len(t, jr.Summaries, len(ss))
	for i, s := range ss {
		assert.Equal(t, s.Proxies, jr.Summaries[i].Proxies)
		assert.Equal(t, s.Lines(), jr.Summaries[i].Lines)
	}
}

// -csv reads back: one row per run with its figures, then one per
// backend, under a header naming every column.
func TestWriteCSV(t *testing.T) {
	rep := exported(t)
	var buf bytes.Buffer
	require.NoError(t, (&sim.Document{Reports: []*sim.Report{rep}}).WriteCSV(&buf))
	rows, err := csv.NewReader(&buf).ReadAll()
	require.NoError(t, err)
	header := rows[0]
	col := map[string]int{}
	for i, h := range header {
		col[h] = i
	}
	for _, want := range []string{"source", "scenario", "proxies", "variant", "algorithm", "backend", "rps", "p99_ms", "errors", "change_pct", "sent", "share_pct", "in_flight_peak"} {
		require.Contains(t, col, want)
	}
	num := func(row []string, name string) float64 {
		v, err := strconv.ParseFloat(row[col[name]], 64)
		require.NoError(t, err, "%s: %q", name, row[col[name]])
		return v
	}
	k := 1
	for _, sr := range rep.Scenarios {
		for _, r := range sr.Results {
			row := rows[k]
			k++
			assert.Equal(t, []string{"simulation", sr.Scenario.Name, strconv.Itoa(sr.Proxies), r.Variant.String(), r.Algorithm, ""}, row[:6])
			assert.Equal(t, r.RPS, num(row, "rps"))
			assert.Equal(t, float64(r.P99)/float64(time.Millisecond), num(row, "p99_ms"))
			assert.Equal(t, float64(r.Errors), num(row, "errors"))
			if r.Failure != nil {
				assert.Equal(t, 100*r.Failure.Change(), num(row, "change_pct"))
			} else {
				assert.Empty(t, row[col["change_pct"]], "no outage, no change")
			}
			assert.Empty(t, row[col["sent"]], "per-backend columns are empty on a run's row")
			for b, br := range r.Backends {
				row := rows[k]
				k++
				assert.Equal(t, sr.Scenario.Label(b), row[col["backend"]])
				assert.Equal(t, float64(br.Sent), num(row, "sent"))
				assert.Equal(t, 100*br.Share, num(row, "share_pct"))
				assert.Empty(t, row[col["rps"]])
			}
		}
	}
	assert.Len(t, rows, k, "nothing more")
}
