package health_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/health"
	"github.com/lbkit/lbkit/rr"
)

// interval is the default FailureRateCheck.Interval, Envoy's 10 s.
const interval = health.DefaultFailureRateInterval

// spread reports whether the c-th request (from 0) to a backend failing
// pct percent of its requests fails: the failures are spread evenly, as
// far apart as they can be, so that at 30% no two come in a row and
// ConsecutiveFailures never fires.
func spread(c, pct int) bool {
	return (c+1)*pct/100 > c*pct/100
}

// traffic sends requests through the rig's Pick and reports each to Done,
// failing those of backend i that spread(count, pct[i]) says fail, where
// count is backend i's running count of requests kept in sent. It applies
// after the last. Picks go where health lets them: not to an ejected
// backend, one at a time to a backend on trial.
func (r *rig) traffic(t *testing.T, n int, pct map[int]int, sent map[int]int) {
	t.Helper()
	index := make(map[string]int, len(r.bs))
	for i, b := range r.bs {
		index[b.ID()] = i
	}
	for range n {
		b, err := r.h.Pick(balancer.Request{})
		require.NoError(t, err)
		i := index[b.ID()]
		var res balancer.Result
		if spread(sent[i], pct[i]) {
			res.Err = errFail
		}
		sent[i]++
		r.h.Done(b, res)
	}
	r.h.Apply()
}

// direct reports k results straight to backend i's Done (no Pick), the
// c-th failing if spread(c, pct) says so. It does not apply.
func (r *rig) direct(i, k, pct int) {
	for c := range k {
		var res balancer.Result
		if spread(c, pct) {
			res.Err = errFail
		}
		r.h.Done(r.bs[i], res)
	}
}

// tick moves the clock one interval on and applies: the judgement.
func (r *rig) tick() {
	r.clock.Advance(interval)
	r.h.Apply()
}

// ejectedBy returns the indices of the backends ejected, by reason.
func (r *rig) ejectedBy() map[health.Reason][]int {
	out := map[health.Reason][]int{}
	for i, st := range r.h.View().Backends {
		if st.State == health.Ejected {
			out[st.Reason] = append(out[st.Reason], i)
		}
	}
	return out
}

// A backend failing 30% of its requests, among four that never fail, is
// never ejected by consecutive failures (its failures never come two in
// a row) but is ejected by its failure rate, with Threshold 20%, within
// two intervals, and only it.
func TestFailureRateEjects(t *testing.T) {
	r := newRig(t, nil, health.Config{FailureRate: &health.FailureRateCheck{Threshold: 20}}, 5)
	sent := map[int]int{}
	at := -1
	for k := range 2 {
		r.traffic(t, 500, map[int]int{0: 30}, sent) // 100 requests each
		r.tick()
		if r.state(0).State == health.Ejected {
			at = k + 1
			break
		}
	}
	t.Logf("ejected after %d interval(s); requests sent per backend: %v", at, sent)
	require.NotEqual(t, -1, at, "not ejected within two intervals")
	st := r.state(0)
	assert.Equal(t, health.ReasonFailureRate, st.Reason)
	assert.Equal(t, "failure rate", st.Reason.String())
	assert.Equal(t, r.clock.Now().Add(health.DefaultBaseEjectionTime), st.EjectedUntil)
	assert.Equal(t, r.without(0), r.spy.current())
	changes := r.rec.all()
	require.Len(t, changes, 1, "one change: backend 0's ejection")
	c := changes[0]
	assert.Equal(t, health.ReasonFailureRate, c.Reason)
	require.Error(t, c.Err)
	assert.Contains(t, c.Err.Error(), "30 of 100 requests failed")
	t.Logf("change: %s", c)
	for i := 1; i < 5; i++ {
		assert.Equal(t, health.Up, r.state(i).State, "backend %d", i)
	}
}

// With the default Threshold, Envoy's 85%, a backend failing 90% of its
// requests is ejected, and one failing 80% is not. ConsecutiveFailures is
// set out of reach, so that the runs of nine failures at 90% do not eject
// first: the failure rate alone decides.
func TestFailureRateDefaultThreshold(t *testing.T) {
	r := newRig(t, nil, health.Config{ConsecutiveFailures: 1 << 30, FailureRate: &health.FailureRateCheck{}}, 6)
	sent := map[int]int{}
	r.traffic(t, 600, map[int]int{0: 90, 1: 80}, sent)
	r.tick()
	assert.Equal(t, map[health.Reason][]int{health.ReasonFailureRate: {0}}, r.ejectedBy())
	assert.Equal(t, r.without(0), r.spy.current())
	for range 3 {
		r.traffic(t, 500, map[int]int{0: 90, 1: 80}, sent)
		r.tick()
		assert.Equal(t, health.Up, r.state(1).State, "80%% is below 85%%: requests %v", sent)
	}
}

// A backend at 1% failures, with a Threshold of 20%, stays in for ten
// intervals, as do the others; nothing changes.
func TestFailureRateLowStays(t *testing.T) {
	r := newRig(t, nil, health.Config{FailureRate: &health.FailureRateCheck{Threshold: 20}}, 5)
	sent := map[int]int{}
	for range 10 {
		r.traffic(t, 1000, map[int]int{0: 1}, sent)
		r.tick()
	}
	assert.Empty(t, r.rec.all(), "no change of state")
	assert.Equal(t, 1, r.spy.updates(), "only the first Update reached the inner picker")
	assert.Equal(t, 2000, sent[0], "backend 0 had its share of requests")
}

// Seven of ten backends failing half their requests: never more than
// MaxEjectedPercent (50%: five) are ejected at once, through ejections
// ending, trials and re-ejections over twelve intervals; and the failing
// backends do get ejected, by their rate.
func TestFailureRateCap(t *testing.T) {
	r := newRig(t, nil, health.Config{FailureRate: &health.FailureRateCheck{Threshold: 20}}, 10)
	pct := map[int]int{0: 50, 1: 50, 2: 50, 3: 50, 4: 50, 5: 50, 6: 50}
	sent := map[int]int{}
	most := 0
	for k := range 12 {
		r.traffic(t, 1000, pct, sent)
		r.tick()
		out := 0
		for i, st := range r.h.View().Backends {
			if st.State == health.Ejected {
				out++
				assert.Less(t, i, 7, "interval %d: a healthy backend %d is ejected", k, i)
			}
		}
		assert.LessOrEqual(t, out, 5, "interval %d: %d ejected", k, out)
		most = max(most, out)
	}
	assert.Equal(t, 5, most, "the cap is reached")
	rate := 0
	for _, c := range r.rec.all() {
		if c.New == health.Ejected && c.Reason == health.ReasonFailureRate {
			rate++
		}
	}
	assert.GreaterOrEqual(t, rate, 5, "ejections for the failure rate")
}

// A backend below RequestVolume (50) in an interval is not judged, however
// badly it fails; at 50 it is. And too few backends with volume
// (MinimumHosts, 3 by default) judge none.
func TestFailureRateVolume(t *testing.T) {
	cfg := health.Config{ConsecutiveFailures: 1 << 30, FailureRate: &health.FailureRateCheck{}}
	t.Run("request volume", func(t *testing.T) {
		r := newRig(t, nil, cfg, 5)
		for range 3 {
			r.direct(0, 49, 100)
			for i := 1; i < 5; i++ {
				r.direct(i, 100, 0)
			}
			r.h.Apply()
			r.tick()
			assert.Equal(t, health.Up, r.state(0).State, "49 requests, all failed: not judged")
		}
		r.direct(0, 50, 100)
		for i := 1; i < 5; i++ {
			r.direct(i, 100, 0)
		}
		r.h.Apply()
		r.tick()
		assert.Equal(t, health.Ejected, r.state(0).State, "50 requests, all failed")
		assert.Equal(t, health.ReasonFailureRate, r.state(0).Reason)
	})
	t.Run("minimum hosts", func(t *testing.T) {
		r := newRig(t, nil, cfg, 5)
		r.direct(0, 60, 100)
		r.direct(1, 60, 0)
		for i := 2; i < 5; i++ {
			r.direct(i, 49, 0)
		}
		r.h.Apply()
		r.tick()
		assert.Equal(t, health.Up, r.state(0).State, "two backends with volume, fewer than 3: none judged")
		r.direct(0, 60, 100)
		r.direct(1, 60, 0)
		r.direct(2, 50, 0)
		r.h.Apply()
		r.tick()
		assert.Equal(t, health.Ejected, r.state(0).State, "three backends with volume")
	})
}

// An ejection for the failure rate ends as any does: after
// BaseEjectionTime the backend is back on trial; a trial request that
// succeeds brings it back in full. If it goes on failing, it is ejected
// again for twice as long (backoff).
func TestFailureRateReadmission(t *testing.T) {
	cfg := health.Config{FailureRate: &health.FailureRateCheck{Threshold: 20}}
	for _, tc := range []struct {
		name  string
		after int // backend 0's failure percentage once it is back
	}{{"recovered", 0}, {"still failing", 30}} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, nil, cfg, 5)
			sent := map[int]int{}
			r.traffic(t, 500, map[int]int{0: 30}, sent)
			r.tick()
			require.Equal(t, health.Ejected, r.state(0).State)
			first := r.state(0).EjectedUntil
			for r.clock.Now().Before(first) {
				r.traffic(t, 400, nil, sent)
				r.tick()
			}
			st := r.state(0)
			require.NotEqual(t, health.Ejected, st.State, "the ejection ended at %v", first)
			assert.Equal(t, health.ReasonEjectionEnded, st.Reason)
			assert.True(t, st.Trial, "back on trial")

			before := sent[0]
			sent[0] = 0 // its failure pattern starts afresh
			for range 3 {
				r.traffic(t, 500, map[int]int{0: tc.after}, sent)
				r.tick()
			}
			var again []health.Change
			for _, c := range r.rec.all() {
				if c.ID == r.bs[0].ID() && c.New == health.Ejected {
					again = append(again, c)
				}
			}
			t.Logf("requests to backend 0 before its return %d, after %d; ejections %v", before, sent[0], again)
			if tc.after == 0 {
				assert.Len(t, again, 1, "no second ejection")
				st := r.state(0)
				assert.Equal(t, health.Up, st.State)
				assert.False(t, st.Trial, "a request succeeded: off trial")
				assert.Greater(t, sent[0], 100, "back in full: a fifth of the traffic")
				return
			}
			require.Len(t, again, 2, "ejected again")
			assert.Equal(t, 2*health.DefaultBaseEjectionTime, again[1].Until.Sub(again[1].At),
				"the second ejection in a row lasts twice as long")
		})
	}
}

// NoEjection turns failure-rate ejection off with the rest of passive
// checking.
func TestFailureRateNoEjection(t *testing.T) {
	r := newRig(t, nil, health.Config{NoEjection: true, FailureRate: &health.FailureRateCheck{Threshold: 1}}, 5)
	for range 3 {
		r.traffic(t, 500, map[int]int{0: 100}, map[int]int{})
		r.tick()
	}
	assert.Empty(t, r.rec.all())
}

// Pick and Done allocate nothing with failure rates counted, failures
// included; the judgement runs in Apply, off the request path.
func TestFailureRateAllocs(t *testing.T) {
	r := newRig(t, nil, health.Config{ConsecutiveFailures: 1 << 30, FailureRate: &health.FailureRateCheck{}}, 5)
	i := 0
	allocs := testing.AllocsPerRun(1000, func() {
		b, err := r.h.Pick(balancer.Request{})
		if err != nil {
			panic(err)
		}
		var res balancer.Result
		if i%3 == 0 {
			res.Err = errFail
		}
		i++
		r.h.Done(b, res)
	})
	assert.Zero(t, allocs)
	r.tick() // the counts were kept: a third failed, below 85%
	assert.Equal(t, health.Up, r.state(0).State)
}

// Bad FailureRateCheck values are refused with ErrConfig (and so
// balancer.ErrBadOption), naming the field.
func TestFailureRateConfig(t *testing.T) {
	for _, c := range []struct {
		frc  health.FailureRateCheck
		want string
	}{
		{health.FailureRateCheck{Threshold: -1}, "FailureRate.Threshold is -1"},
		{health.FailureRateCheck{Threshold: 101}, "FailureRate.Threshold is 101"},
		{health.FailureRateCheck{RequestVolume: -5}, "FailureRate.RequestVolume is -5"},
		{health.FailureRateCheck{MinimumHosts: -1}, "FailureRate.MinimumHosts is -1"},
		{health.FailureRateCheck{Interval: -time.Second}, "FailureRate.Interval is -1s"},
		{health.FailureRateCheck{Interval: time.Microsecond}, "FailureRate.Interval is 1µs, want at least 1ms"},
	} {
		t.Run(fmt.Sprintf("%+v", c.frc), func(t *testing.T) {
			frc := c.frc
			h, err := health.New(rr.New(), health.Config{FailureRate: &frc})
			require.Error(t, err)
			assert.Nil(t, h)
			assert.True(t, errors.Is(err, health.ErrConfig))
			assert.True(t, errors.Is(err, balancer.ErrBadOption))
			assert.Contains(t, err.Error(), c.want)
		})
	}
	for _, frc := range []health.FailureRateCheck{{}, {Threshold: 100, RequestVolume: 1, MinimumHosts: 1, Interval: time.Millisecond}} {
		_, err := health.New(rr.New(), health.Config{FailureRate: &frc})
		assert.NoError(t, err, "%+v", frc)
	}
}

// With the real clock and no Start, the first counted request starts the
// lazy applier, which judges every interval while requests come; the
// failing backend is ejected at the end of the first interval. Once
// requests stop, an interval with none schedules nothing more and the
// applier returns by itself: synctest.Test fails if a goroutine of the
// bubble is still blocked when the function returns.
func TestFailureRateLazyApplier(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		inner := newSpy(rr.New())
		h, err := health.New(inner, health.Config{FailureRate: &health.FailureRateCheck{Threshold: 20}})
		require.NoError(t, err)
		bs := balancer.Endpoints(ids(5)...)
		require.NoError(t, h.Update(bs))
		start := time.Now()
		for k := 0; h.View().Backends[0].State != health.Ejected; k++ {
			require.Less(t, k, 200, "not ejected in 20 s")
			for i, b := range bs {
				var res balancer.Result
				if i == 0 && k%3 == 0 {
					res.Err = errFail
				}
				h.Done(b, res)
			}
			time.Sleep(interval / 100)
			synctest.Wait()
		}
		took := time.Since(start)
		t.Logf("ejected after %v of virtual time", took)
		assert.GreaterOrEqual(t, took, interval)
		assert.LessOrEqual(t, took, interval+interval/50)
		assert.Equal(t, health.ReasonFailureRate, h.View().Backends[0].Reason)
		assert.Equal(t, ids(5)[1:], inner.current())
		// No more requests: the ejection ends at 30 s, then an interval
		// with no requests is judged, and after lazyLinger the applier
		// returns.
		time.Sleep(health.DefaultBaseEjectionTime + 2*interval + 2*lazyLinger)
		synctest.Wait()
		assert.Equal(t, ids(5), inner.current())
	})
}

// Under -race, with Start and the real clock: goroutines pick and report
// concurrently while the set is updated, and the backend failing half its
// requests is ejected for its failure rate.
func TestFailureRateConcurrent(t *testing.T) {
	h, err := health.New(rr.New(), health.Config{
		ConsecutiveFailures: 1 << 30,
		FailureRate:         &health.FailureRateCheck{Interval: 20 * time.Millisecond, Threshold: 40, RequestVolume: 10},
	})
	require.NoError(t, err)
	defer h.Close()
	bs := balancer.Endpoints(ids(6)...)
	require.NoError(t, h.Update(bs))
	require.NoError(t, h.Start(context.Background()))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; ; k++ {
				select {
				case <-stop:
					return
				default:
				}
				b, err := h.Pick(balancer.Request{})
				if err != nil {
					t.Error(err)
					return
				}
				var res balancer.Result
				if b.ID() == bs[0].ID() && (k+g)%2 == 0 {
					res.Err = errFail
				}
				h.Done(b, res)
				if k%64 == 0 {
					time.Sleep(time.Millisecond) // let the applier and the updater in
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for k := 0; ; k++ {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			set := bs
			if k%2 == 0 {
				set = bs[:5] // the last leaves and comes back
			}
			if err := h.Update(set); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	eventually(t, func() bool {
		st := h.View().Backends[0]
		return st.State == health.Ejected && st.Reason == health.ReasonFailureRate
	}, "backend 0 not ejected for its failure rate")
	close(stop)
	wg.Wait()
}
