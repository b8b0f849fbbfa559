package lbmetrics

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/health"
)

// DefaultNamespace prefixes every metric name when Config.Namespace is
// empty: lbkit_picks_total, lbkit_requests_in_flight, ...
const DefaultNamespace = "lbkit"

// DefaultPickSampling is how many Picks share one timing when
// Config.PickSampling is zero: one Pick in 8 is timed for
// pick_duration_seconds. Timing a Pick reads the clock twice and adds to
// a histogram that every Pick shares, which costs more than most Picks
// (see the package doc, Measurements); one in 8 pays an eighth of that,
// while a busy proxy still records thousands of timings a second.
const DefaultPickSampling = 8

// DefaultLatencyBuckets returns the upper bounds, in seconds, of the
// request latency histogram when Config.LatencyBuckets is nil: client
// golang's DefBuckets, 5 ms to 10 s, which suit network services.
func DefaultLatencyBuckets() []float64 {
	return slices.Clone(prometheus.DefBuckets)
}

// DefaultPickBuckets returns the upper bounds, in seconds, of the Pick
// duration histogram when Config.PickBuckets is nil: 25 ns to 100 µs. A
// Pick of every lbkit algorithm takes tens to hundreds of nanoseconds; the
// top buckets are there to show a picker that does not.
func DefaultPickBuckets() []float64 {
	return []float64{25e-9, 50e-9, 100e-9, 250e-9, 500e-9, 1e-6, 2.5e-6, 5e-6, 10e-6, 100e-6}
}

// Config configures a Metrics. The zero value is ready to use: every field
// says what its zero value means.
type Config struct {
	// Namespace is the prefix of every metric name. Empty:
	// DefaultNamespace ("lbkit").
	Namespace string

	// ConstLabels are added to every series. A process with several
	// balancers makes one Metrics for each and tells them apart here:
	// prometheus.Labels{"upstream": "orders"}. They must not use the
	// labels this package sets: backend, state and reason. Nil: none.
	ConstLabels prometheus.Labels

	// LatencyBuckets are the upper bounds, in seconds and increasing, of
	// request_duration_seconds. Nil: DefaultLatencyBuckets().
	LatencyBuckets []float64

	// PickBuckets are the upper bounds, in seconds and increasing, of
	// pick_duration_seconds. Nil: DefaultPickBuckets().
	PickBuckets []float64

	// PickSampling times one Pick in PickSampling for
	// pick_duration_seconds, chosen at random; 1 times every Pick. Zero:
	// DefaultPickSampling. The histogram's count is then about the number
	// of Picks divided by PickSampling; its quantiles are those of every
	// Pick. picks_total counts every Pick whatever this says.
	PickSampling int
}

// Metrics is the set of Prometheus metrics for one balancer: a
// prometheus.Collector to register, the source of the decorator (Wrap),
// and the receiver of health changes (HealthChanged). See the package
// documentation for the metrics it exports.
//
// A Metrics is safe for concurrent use. It wraps one balancer; make one
// Metrics per balancer, with ConstLabels to tell them apart.
type Metrics struct {
	// Immutable after New.
	picks     *prometheus.CounterVec
	failures  *prometheus.CounterVec
	abandoned *prometheus.CounterVec
	latency   *prometheus.HistogramVec
	state     *prometheus.GaugeVec
	changes   *prometheus.CounterVec
	pickErrs  *prometheus.CounterVec
	errNone   prometheus.Counter // pick_errors_total{reason="no_backend"}
	errKey    prometheus.Counter // reason="bad_key"
	errOther  prometheus.Counter // reason="other"
	pickDur   prometheus.Histogram
	inFlight  *prometheus.Desc       // collected from series.flight
	panicking *prometheus.Desc       // collected from health's View
	children  []prometheus.Collector // the vectors and pickDur, for Describe and Collect
	// sampleAt is the largest random draw that times a Pick: one draw in
	// PickSampling is at most this. math.MaxUint64 times every Pick.
	sampleAt uint64

	// bal is the decorator Wrap made, nil before.
	bal atomic.Pointer[Balancer]

	// stateMu serialises every write to the state and changes series and
	// to series.deleted, so that two writers never leave a backend with
	// two states at 1, nor a deleted backend with a series. It is never
	// held on the request path, nor while calling out of this package
	// except into a health Balancer's View, which calls nothing back.
	stateMu sync.Mutex
}

// Lock order: Balancer.mu, then Metrics.stateMu, then a health Balancer's
// own mutex (inside View). A health Balancer calls OnChange with no lock of
// its own held, so HealthChanged, which takes stateMu alone, never closes a
// cycle, even when health delivers a change inside our Update.

var _ prometheus.Collector = (*Metrics)(nil)

// labels this package sets; ConstLabels may not use them.
const (
	labelBackend = "backend"
	labelState   = "state"
	labelReason  = "reason"
)

// numStates is the number of health.State values, Up to Maintenance.
const numStates = int(health.Maintenance) + 1

// New returns the metrics described by cfg, not yet registered: register
// them with reg.MustRegister(m) (or Register, to handle a clash), and
// decorate the balancer with Wrap. New returns an error, and no Metrics,
// wrapping balancer.ErrBadOption, if a name or label in cfg is not valid
// Prometheus, if ConstLabels uses backend, state or reason, if buckets are
// not increasing, or if PickSampling is negative.
func New(cfg Config) (*Metrics, error) {
	ns := cfg.Namespace
	if ns == "" {
		ns = DefaultNamespace
	}
	latency := cfg.LatencyBuckets
	if latency == nil {
		latency = DefaultLatencyBuckets()
	}
	if err := checkBuckets(latency); err != nil {
		return nil, fmt.Errorf("lbmetrics: %w: LatencyBuckets: %w", balancer.ErrBadOption, err)
	}
	pick := cfg.PickBuckets
	if pick == nil {
		pick = DefaultPickBuckets()
	}
	if err := checkBuckets(pick); err != nil {
		return nil, fmt.Errorf("lbmetrics: %w: PickBuckets: %w", balancer.ErrBadOption, err)
	}
	sampling := cfg.PickSampling
	switch {
	case sampling < 0:
		return nil, fmt.Errorf("lbmetrics: %w: PickSampling %d is negative", balancer.ErrBadOption, sampling)
	case sampling == 0:
		sampling = DefaultPickSampling
	}
	for name := range cfg.ConstLabels {
		if name == labelBackend || name == labelState || name == labelReason {
			return nil, fmt.Errorf("lbmetrics: %w: ConstLabels: %q is a label lbmetrics sets itself", balancer.ErrBadOption, name)
		}
	}

	cl := cfg.ConstLabels
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: name, Help: help, ConstLabels: cl}, labels)
	}
	m := &Metrics{
		picks:     counter("picks_total", "Times Pick returned the backend (a retry is a pick of its own).", labelBackend),
		failures:  counter("failures_total", "Requests to the backend that failed: Done with a non-nil error, not abandoned.", labelBackend),
		abandoned: counter("abandoned_total", "Requests to the backend the caller gave up on: Done with an error wrapping balancer.ErrAbandoned or context.Canceled.", labelBackend),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Name: "request_duration_seconds", ConstLabels: cl, Buckets: latency,
			Help: "Latency reported to Done for the backend's requests, failures included; abandoned and unmeasured requests are left out.",
		}, []string{labelBackend}),
		state: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ns, Name: "backend_state", ConstLabels: cl,
			Help: "Health state of the backend: 1 for its current state (up, ejected, down, draining, maintenance), 0 for the others.",
		}, []string{labelBackend, labelState}),
		changes:  counter("backend_state_changes_total", "Changes of the backend's health state, by the state entered.", labelBackend, labelState),
		pickErrs: counter("pick_errors_total", "Picks that returned an error, by reason: no_backend (the set is empty), bad_key (an affinity key the picker cannot use), other.", labelReason),
		pickDur: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: ns, Name: "pick_duration_seconds", ConstLabels: cl, Buckets: pick,
			Help: "Time spent in the picker's Pick, for a random sample of picks (see lbmetrics.Config.PickSampling).",
		}),
		inFlight: prometheus.NewDesc(prometheus.BuildFQName(ns, "", "requests_in_flight"),
			"Requests picked for the backend whose Done has not been called yet.", []string{labelBackend}, cl),
		panicking: prometheus.NewDesc(prometheus.BuildFQName(ns, "", "health_panic"),
			"1 when no backend is eligible and health hands the picker every backend not drained or in maintenance (panic mode), else 0.", nil, cl),
		sampleAt: math.MaxUint64,
	}
	if sampling > 1 {
		m.sampleAt = math.MaxUint64 / uint64(sampling)
	}
	m.children = []prometheus.Collector{m.picks, m.failures, m.abandoned, m.latency, m.state, m.changes, m.pickErrs, m.pickDur}
	m.errNone = m.pickErrs.WithLabelValues("no_backend")
	m.errKey = m.pickErrs.WithLabelValues("bad_key")
	m.errOther = m.pickErrs.WithLabelValues("other")

	// A registry of our own finds what a Desc refused (a bad namespace, a
	// bad constant label) now, rather than at the user's registration.
	if err := prometheus.NewPedanticRegistry().Register(m); err != nil {
		return nil, fmt.Errorf("lbmetrics: %w: %w", balancer.ErrBadOption, err)
	}
	return m, nil
}

// checkBuckets reports bucket bounds that are empty, not numbers, or not
// increasing, which client_golang would panic on.
func checkBuckets(bs []float64) error {
	if len(bs) == 0 {
		return errors.New("no bucket")
	}
	for i, b := range bs {
		if math.IsNaN(b) {
			return fmt.Errorf("bucket %d is NaN", i)
		}
		if i > 0 && b <= bs[i-1] {
			return fmt.Errorf("bucket %d (%g) is not above bucket %d (%g)", i, b, i-1, bs[i-1])
		}
	}
	return nil
}

// Wrap returns a Balancer that passes every call on to inner and records
// it. inner is typically a *health.Balancer around an algorithm; give the
// backends to the returned Balancer's Update, never to inner's. Wrap
// returns an error for a nil inner, or if this Metrics already wraps a
// balancer.
func (m *Metrics) Wrap(inner balancer.Balancer) (*Balancer, error) {
	if inner == nil || isNilPointer(inner) {
		return nil, errors.New("lbmetrics: wrap: nil balancer")
	}
	b := &Balancer{m: m, inner: inner, draining: map[string]*series{}}
	b.fb, _ = inner.(balancer.Feedback)
	if v, ok := balancer.As[viewer](inner); ok {
		b.view = v.View // health's, at any depth inside inner
	}
	b.cur.Store(&snapshot{})
	if !m.bal.CompareAndSwap(nil, b) {
		return nil, errors.New("lbmetrics: wrap: this Metrics already wraps a balancer; make one Metrics per balancer, told apart by Config.ConstLabels")
	}
	return b, nil
}

// viewer is what a *health.Balancer offers to read every backend's state.
type viewer interface {
	View() health.View
}

func isNilPointer(v any) bool {
	r := reflect.ValueOf(v)
	return r.Kind() == reflect.Pointer && r.IsNil()
}

// HealthChanged records a change of a backend's health state. Pass it as
// health.Config.OnChange, or call it from yours:
//
//	h, err := health.New(algo, health.Config{OnChange: m.HealthChanged})
//
// It sets the backend's backend_state series and counts the change in
// backend_state_changes_total. Changes for backends the wrapped Balancer
// does not know (before Wrap, or after their series were deleted) are
// ignored. It takes a mutex of its own, never the one Update holds, so
// health may call it from inside an Update.
func (m *Metrics) HealthChanged(c health.Change) {
	b := m.bal.Load()
	if b == nil {
		return
	}
	s := b.cur.Load().byID[c.ID]
	if s == nil {
		return
	}
	m.stateMu.Lock()
	defer m.stateMu.Unlock()
	if s.deleted || int(c.New) >= numStates {
		return
	}
	m.setState(s, c.New)
	m.changes.WithLabelValues(s.id, c.New.String()).Inc()
}

// setState makes st the only state at 1 among s's state series, creating
// them on first use: a backend has no state series until health has said
// something about it. Call with stateMu held.
func (m *Metrics) setState(s *series, st health.State) {
	if s.states[0] == nil {
		for i := range s.states {
			s.states[i] = m.state.WithLabelValues(s.id, health.State(i).String())
		}
	}
	for i, g := range s.states {
		if i == int(st) {
			g.Set(1)
		} else {
			g.Set(0)
		}
	}
}

// newSeries makes the series of a backend joining the set, resolving every
// child once, so that Pick and Done find them with a map read.
func (m *Metrics) newSeries(id string) *series {
	return &series{
		id:        id,
		picks:     m.picks.WithLabelValues(id),
		failures:  m.failures.WithLabelValues(id),
		abandoned: m.abandoned.WithLabelValues(id),
		latency:   m.latency.WithLabelValues(id),
	}
}

// deleteSeries removes every series of s from the metrics, so that a
// backend gone for good stops being exported.
func (m *Metrics) deleteSeries(s *series) {
	m.stateMu.Lock()
	defer m.stateMu.Unlock()
	s.deleted = true
	m.picks.DeleteLabelValues(s.id)
	m.failures.DeleteLabelValues(s.id)
	m.abandoned.DeleteLabelValues(s.id)
	m.latency.DeleteLabelValues(s.id)
	m.state.DeletePartialMatch(prometheus.Labels{labelBackend: s.id})
	m.changes.DeletePartialMatch(prometheus.Labels{labelBackend: s.id})
}

// refreshStates reads every backend's state from the wrapped health
// Balancer, if it has a View, and sets the state series from it; it
// returns the View's panic flag, and whether there was a View. A View read
// under stateMu is never older than a change already passed to
// HealthChanged, and changes applied after it are passed later, so the
// series end at the newest state.
func (m *Metrics) refreshStates(b *Balancer) (panicking, ok bool) {
	if b.view == nil {
		return false, false
	}
	m.stateMu.Lock()
	defer m.stateMu.Unlock()
	v := b.view()
	byID := b.cur.Load().byID
	for _, st := range v.Backends {
		if s := byID[st.ID]; s != nil && !s.deleted && int(st.State) < numStates {
			m.setState(s, st.State)
		}
	}
	return v.Panic, true
}

// Describe sends the descriptors of every metric.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.children {
		c.Describe(ch)
	}
	ch <- m.inFlight
	ch <- m.panicking
}

// Collect sends every metric's current value. Before that it deletes the
// series of removed backends whose requests have all finished (see the
// package doc, "Removed backends") and re-reads health states from the
// wrapped health Balancer, if it is one. It runs at every scrape, never on
// the request path.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	if b := m.bal.Load(); b != nil {
		b.mu.Lock()
		b.sweep(nil)
		b.mu.Unlock()
		if panicking, ok := m.refreshStates(b); ok {
			v := 0.0
			if panicking {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(m.panicking, prometheus.GaugeValue, v)
		}
		for id, s := range b.cur.Load().byID {
			ch <- prometheus.MustNewConstMetric(m.inFlight, prometheus.GaugeValue, float64(s.flight.Load()), id)
		}
	}
	for _, c := range m.children {
		c.Collect(ch)
	}
}
