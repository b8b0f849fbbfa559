// Package route sends each request to the backends whose label matches
// what the request asks for, with a fallback when none can take it:
// canaries, blue/green, versions (Envoy's subset load balancer; the
// routing by metadata that kratos and go-kit users ask for).
//
//	lb, err := route.New(func() balancer.Balancer { return wrr.New() }, route.Config{Label: "track"})
//	h, err := health.New(lb, health.Config{}) // health ▶ route ▶ a wrr per track
//	_ = h.Update([]balancer.Backend{
//		balancer.NewEndpoint("10.0.0.1:8080", 95).WithLabels(map[string]string{"track": "stable"}),
//		balancer.NewEndpoint("10.0.0.9:8080", 5).WithLabels(map[string]string{"track": "canary"}),
//	})
//	b, err := h.Pick(balancer.Request{Route: "canary"}) // the canary; without a Route, 5% of the time
//
// Backends carry labels (balancer.Labeler: Endpoint.WithLabels, or the
// metadata a discovery source reads); Config.Label names the one whose
// values make the sets. Each value that occurs is a set with a picker of
// its own, made by the factory given to New, so any algorithm runs inside
// each set. A request names its set in balancer.Request.Route (lbhttp can
// take it from a header); a request without one goes to Config.Default's
// set, or, with no Default, to any backend, a set being chosen in
// proportion to its weight, so that a canary's weight is its share of
// that traffic.
//
// # Fallback
//
// When the set a request asks for has no backend (no backend was ever so
// labelled, or health took every one out: drained, ejected, failing its
// probes), Config.Fallback decides, after Envoy's fallback_policy: Any
// (the default, ANY_ENDPOINT) sends it where a request without a Route
// goes, DefaultSet (DEFAULT_SUBSET) to Config.Default's set, Fail
// (NO_FALLBACK) answers balancer.ErrNoBackend. Any is the default because
// a request is better served by the stable version than refused when its
// canary dies; choose Fail where a request must never reach another
// version.
//
// # What a caller must do
//
// Put health around the Balancer, not inside each set: health hands route
// the eligible backends, so a set that health empties falls back at once.
// Labels are read once per Update, and again from the Backend value a Done
// is given, to find the picker that made the pick: a backend's labels must
// not change (give a relabelled backend as a new value, as
// Endpoint.WithLabels does). Keep label values few (up to about a hundred
// sets); each is a picker.
//
// # Cost
//
// Pick: one atomic load, one map read of Request.Route (none for a set of
// one value), a random number to choose a set by weight (a scan of up to
// eight sets, a binary search beyond), and the inner Pick; Done: a read of
// the backend's label and one map read (none for one value); neither locks
// nor allocates (TestAllocs; BenchmarkPick sets both beside the bare
// picker's, over 1,000 backends in 50 sets). Update: O(n log n), and the
// Update of each set's picker whose backends changed; up to 64 pickers of
// values no backend has any more are kept, so that a set that empties and
// fills again keeps what its picker learned.
//
// # Concurrency
//
// Pick and Done are safe for concurrent use with each other and with
// Update, Start and Close, which serialise on a mutex that Pick and Done
// never take. A Retry with Request.Avoid moves on to another set, handing
// the avoided pick back with Done(balancer.ErrAbandoned), only when the
// request could go to any backend (no Route and no Default, or Fallback
// Any); a request held to its set gets Avoid back when it is the set's
// only backend, as any picker's set of one does.
package route
