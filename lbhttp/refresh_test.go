package lbhttp_test

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/lbhttp"
	"github.com/lbkit/lbkit/rr"
)

// fakeResolver answers from a script, one answer per lookup; the last
// answer repeats.
type fakeResolver struct {
	mu      sync.Mutex
	answers []answer
	lookups int
	hosts   []string
}

type answer struct {
	addrs []string
	err   error
	block bool          // wait for the context to end
	wait  chan struct{} // if set, wait for it to close before answering
}

func (f *fakeResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	f.mu.Lock()
	a := f.answers[min(f.lookups, len(f.answers)-1)]
	f.lookups++
	f.hosts = append(f.hosts, network+" "+host)
	f.mu.Unlock()
	if a.block {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if a.wait != nil {
		<-a.wait
	}
	if a.err != nil {
		return nil, a.err
	}
	out := make([]netip.Addr, len(a.addrs))
	for i, s := range a.addrs {
		out[i] = netip.MustParseAddr(s)
	}
	return out, nil
}

func (f *fakeResolver) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lookups
}

// updateCounter is a picker that counts its Updates.
type updateCounter struct {
	*rr.Picker
	mu      sync.Mutex
	updates [][]string
}

func (u *updateCounter) Update(bs []balancer.Backend) error {
	ids := make([]string, len(bs))
	for i, b := range bs {
		ids[i] = b.ID()
	}
	u.mu.Lock()
	u.updates = append(u.updates, ids)
	u.mu.Unlock()
	return u.Picker.Update(bs)
}

func (u *updateCounter) all() [][]string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([][]string(nil), u.updates...)
}

func TestRefresh(t *testing.T) {
	errDNS := errors.New("SERVFAIL")
	res := &fakeResolver{answers: []answer{
		{addrs: []string{"10.0.0.2", "10.0.0.1", "10.0.0.2"}}, // unsorted, with a duplicate
		{addrs: []string{"10.0.0.1", "10.0.0.2"}},             // same set: no Update
		{err: errDNS}, // keep the previous set
		{addrs: nil},  // keep the previous set
		{addrs: []string{"10.0.0.3", "2001:db8::3", "::ffff:10.0.0.4"}},
	}}
	p := &updateCounter{Picker: rr.New()}
	r, err := lbhttp.NewRefresher(p, lbhttp.RefresherConfig{Host: "api.internal", Port: 8080, Resolver: res})
	require.NoError(t, err)
	ctx := context.Background()

	require.NoError(t, r.Refresh(ctx))
	assert.Equal(t, []string{"10.0.0.1:8080", "10.0.0.2:8080"}, r.Addrs())
	require.NoError(t, r.Refresh(ctx))
	assert.Len(t, p.all(), 1, "an unchanged answer does not Update")

	err = r.Refresh(ctx)
	require.ErrorIs(t, err, errDNS)
	assert.Contains(t, err.Error(), `resolving "api.internal"`)
	err = r.Refresh(ctx)
	require.ErrorContains(t, err, "resolved to no address")
	assert.Len(t, p.all(), 1, "a failed or empty answer does not Update")
	b, err := p.Pick(balancer.Request{})
	require.NoError(t, err, "the previous set is still in use")
	assert.Contains(t, []string{"10.0.0.1:8080", "10.0.0.2:8080"}, b.ID())

	require.NoError(t, r.Refresh(ctx))
	assert.Equal(t, [][]string{
		{"10.0.0.1:8080", "10.0.0.2:8080"},
		{"10.0.0.3:8080", "10.0.0.4:8080", "[2001:db8::3]:8080"},
	}, p.all())
	assert.Equal(t, "ip api.internal", res.hosts[0])
}

// TestRefreshAliases checks that spellings of one address in an answer
// (an IPv6 address written two ways, an IPv4-mapped IPv6 address and the
// IPv4 address it maps) become one backend, whose ID is the canonical
// spelling balancer.CanonicalAddr gives: the resolver answers netip.Addr
// values, which have one form each.
func TestRefreshAliases(t *testing.T) {
	res := &fakeResolver{answers: []answer{{addrs: []string{"0:0::1", "::1", "::ffff:10.0.0.1", "10.0.0.1", "2001:DB8::A"}}}}
	p := &updateCounter{Picker: rr.New()}
	r, err := lbhttp.NewRefresher(p, lbhttp.RefresherConfig{Host: "api.internal", Port: 80, Resolver: res})
	require.NoError(t, err)
	require.NoError(t, r.Refresh(context.Background()))
	assert.Equal(t, []string{"10.0.0.1:80", "[2001:db8::a]:80", "[::1]:80"}, r.Addrs())
	for _, id := range r.Addrs() {
		c, err := balancer.CanonicalAddr(id)
		require.NoError(t, err)
		assert.Equal(t, c, id, "the ID is canonical")
	}
}

// TestRefreshOverlap runs two Refreshes at once: the older lookup is held
// until the newer one has finished. The newer answer must stay, even when
// it changed nothing; the older applies only when the newer lookup failed.
func TestRefreshOverlap(t *testing.T) {
	errDNS := errors.New("SERVFAIL")
	tests := []struct {
		name    string
		initial []string // a first Refresh's answer, before the overlap
		newer   answer
		addrs   []string   // the set at the end
		updates [][]string // every Update, the initial one included
	}{
		{"newer changed the set", nil, answer{addrs: []string{"10.0.0.2"}},
			[]string{"10.0.0.2:80"}, [][]string{{"10.0.0.2:80"}}},
		{"newer confirmed the set", []string{"10.0.0.2"}, answer{addrs: []string{"10.0.0.2"}},
			[]string{"10.0.0.2:80"}, [][]string{{"10.0.0.2:80"}}},
		{"newer failed", nil, answer{err: errDNS},
			[]string{"10.0.0.1:80"}, [][]string{{"10.0.0.1:80"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				release := make(chan struct{})
				var answers []answer
				if tt.initial != nil {
					answers = append(answers, answer{addrs: tt.initial})
				}
				answers = append(answers, answer{addrs: []string{"10.0.0.1"}, wait: release}, tt.newer)
				res := &fakeResolver{answers: answers}
				p := &updateCounter{Picker: rr.New()}
				r, err := lbhttp.NewRefresher(p, lbhttp.RefresherConfig{Host: "h", Port: 80, Resolver: res})
				require.NoError(t, err)
				if tt.initial != nil {
					require.NoError(t, r.Refresh(t.Context()))
				}
				older := make(chan error, 1)
				go func() { older <- r.Refresh(t.Context()) }()
				synctest.Wait() // the older lookup is held
				newerErr := r.Refresh(t.Context())
				close(release)
				require.NoError(t, <-older, "a superseded answer is no error")
				if tt.newer.err != nil {
					require.ErrorIs(t, newerErr, tt.newer.err)
				} else {
					require.NoError(t, newerErr)
				}
				assert.Equal(t, tt.addrs, r.Addrs())
				assert.Equal(t, tt.updates, p.all())
			})
		})
	}
}

// TestRefreshUpdateError checks that a picker refusing the set leaves the
// refresher's view unchanged, so the next answer is tried again.
func TestRefreshUpdateError(t *testing.T) {
	res := &fakeResolver{answers: []answer{{addrs: []string{"10.0.0.1"}}}}
	p := &failingUpdater{err: errors.New("no thanks")}
	r, err := lbhttp.NewRefresher(p, lbhttp.RefresherConfig{Host: "h", Port: 1, Resolver: res})
	require.NoError(t, err)
	require.ErrorIs(t, r.Refresh(context.Background()), p.err)
	assert.Empty(t, r.Addrs())
	p.err = nil
	require.NoError(t, r.Refresh(context.Background()))
	assert.Equal(t, []string{"10.0.0.1:1"}, r.Addrs())
}

type failingUpdater struct{ err error }

func (f *failingUpdater) Update([]balancer.Backend) error { return f.err }

func TestNewRefresherErrors(t *testing.T) {
	tests := []struct {
		name string
		u    balancer.Updater
		cfg  lbhttp.RefresherConfig
		want string
	}{
		{"nil updater", nil, lbhttp.RefresherConfig{Host: "h", Port: 1}, "lbhttp: refresher: nil updater"},
		{"no host", rr.New(), lbhttp.RefresherConfig{Port: 1}, "lbhttp: refresher: balancer: bad option: empty Host"},
		{"no port", rr.New(), lbhttp.RefresherConfig{Host: "h"}, "lbhttp: refresher: balancer: bad option: zero Port"},
		{"negative interval", rr.New(), lbhttp.RefresherConfig{Host: "h", Port: 1, Interval: -time.Second}, "lbhttp: refresher: balancer: bad option: Interval -1s, want 0 (the default) or at least 1ms"},
		{"interval in nanoseconds", rr.New(), lbhttp.RefresherConfig{Host: "h", Port: 1, Interval: 30}, "lbhttp: refresher: balancer: bad option: Interval 30ns, want 0 (the default) or at least 1ms"},
		{"negative timeout", rr.New(), lbhttp.RefresherConfig{Host: "h", Port: 1, Timeout: -time.Second}, "lbhttp: refresher: balancer: bad option: negative Timeout -1s"},
		{"bad network", rr.New(), lbhttp.RefresherConfig{Host: "h", Port: 1, Network: "tcp"}, `lbhttp: refresher: balancer: bad option: Network "tcp" is not ip, ip4 or ip6`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := lbhttp.NewRefresher(tt.u, tt.cfg)
			assert.Nil(t, r)
			assert.EqualError(t, err, tt.want)
			if tt.u != nil {
				assert.ErrorIs(t, err, balancer.ErrBadOption)
			}
		})
	}
}

// TestRefresherLoop drives Start in a synctest bubble: a lookup at once,
// then one per Interval; failures reach OnError and keep the set; Close
// stops the goroutine, which synctest would report as leaked otherwise.
func TestRefresherLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		errDNS := errors.New("timeout")
		res := &fakeResolver{answers: []answer{
			{addrs: []string{"10.0.0.1"}},
			{err: errDNS},
			{addrs: []string{"10.0.0.1", "10.0.0.2"}},
		}}
		var errs []error
		p := &updateCounter{Picker: rr.New()}
		r, err := lbhttp.NewRefresher(p, lbhttp.RefresherConfig{
			Host: "h", Port: 80, Interval: 10 * time.Second, Resolver: res,
			OnError: func(err error) { errs = append(errs, err) },
		})
		require.NoError(t, err)
		require.NoError(t, r.Start(t.Context()))
		require.ErrorIs(t, r.Start(t.Context()), balancer.ErrStarted)

		synctest.Wait()
		assert.Equal(t, 1, res.count(), "first lookup at once")
		assert.Equal(t, []string{"10.0.0.1:80"}, r.Addrs())

		time.Sleep(10 * time.Second)
		synctest.Wait()
		assert.Equal(t, 2, res.count())
		require.Len(t, errs, 1)
		assert.ErrorIs(t, errs[0], errDNS)
		assert.Equal(t, []string{"10.0.0.1:80"}, r.Addrs(), "kept after a failure")

		time.Sleep(10 * time.Second)
		synctest.Wait()
		assert.Equal(t, []string{"10.0.0.1:80", "10.0.0.2:80"}, r.Addrs())

		require.NoError(t, r.Close())
		require.NoError(t, r.Close(), "Close twice is harmless")
		n := res.count()
		time.Sleep(time.Minute)
		synctest.Wait()
		assert.Equal(t, n, res.count(), "no lookup after Close")
		require.ErrorIs(t, r.Start(t.Context()), balancer.ErrClosed)
	})
}

// TestRefresherCloseDuringLookup checks that Close ends a hanging lookup
// rather than waiting for its timeout, and that the lookup's own timeout
// bounds it when nobody closes.
func TestRefresherCloseDuringLookup(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		res := &fakeResolver{answers: []answer{{block: true}}}
		var errs []error
		r, err := lbhttp.NewRefresher(rr.New(), lbhttp.RefresherConfig{
			Host: "h", Port: 80, Interval: time.Minute, Timeout: 2 * time.Second, Resolver: res,
			OnError: func(err error) { errs = append(errs, err) },
		})
		require.NoError(t, err)
		require.NoError(t, r.Start(t.Context()))
		time.Sleep(3 * time.Second)
		synctest.Wait()
		require.Len(t, errs, 1, "the lookup timed out after Timeout")
		assert.ErrorIs(t, errs[0], context.DeadlineExceeded)

		time.Sleep(time.Minute) // the second lookup is now hanging
		synctest.Wait()
		assert.Equal(t, 2, res.count())
		start := time.Now()
		require.NoError(t, r.Close())
		assert.Zero(t, time.Since(start), "Close did not wait for the lookup's timeout")
		assert.Len(t, errs, 1, "a lookup ended by Close is not reported")
	})
}

// TestRefresherContextEnds checks that the end of Start's context stops
// the goroutine without Close.
func TestRefresherContextEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		res := &fakeResolver{answers: []answer{{addrs: []string{"10.0.0.1"}}}}
		r, err := lbhttp.NewRefresher(rr.New(), lbhttp.RefresherConfig{Host: "h", Port: 80, Interval: time.Second, Resolver: res})
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(t.Context())
		require.NoError(t, r.Start(ctx))
		time.Sleep(5 * time.Second)
		synctest.Wait()
		cancel()
		synctest.Wait()
		n := res.count()
		time.Sleep(5 * time.Second)
		synctest.Wait()
		assert.Equal(t, n, res.count())
		// Nothing is left running: synctest.Test fails on a goroutine that
		// outlives the bubble. Close is still fine to call.
		require.NoError(t, r.Close())
	})
}
