package health_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"syscall"
	"time"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/health"
	"github.com/lbkit/lbkit/leastconn"
	"github.com/lbkit/lbkit/rr"
)

// Wiring health around any picker: New, Update, Start, then per request
// Pick, send, Done; Close at the end. (Compiled, not run: it would send
// requests.)
func Example_wiring() {
	h, err := health.New(leastconn.New(), health.Config{
		Probe:    health.HTTP(health.HTTPCheck{Path: "/healthz"}),
		OnChange: func(c health.Change) { log.Println(c) },
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := h.Update(balancer.Endpoints("10.0.0.1:8080", "10.0.0.2:8080")); err != nil {
		log.Fatal(err)
	}
	if err := h.Start(context.Background()); err != nil {
		log.Fatal(err)
	}
	defer h.Close()

	// For each request:
	b, err := h.Pick(balancer.Request{})
	if err != nil {
		log.Fatal(err) // balancer.ErrNoBackend: the set is empty
	}
	start := time.Now()
	resp, err := http.Get("http://" + b.ID() + "/api")
	if err == nil {
		_, err = io.Copy(io.Discard, resp.Body) // Done goes after the body
		resp.Body.Close()
		if err == nil && resp.StatusCode >= 500 {
			err = fmt.Errorf("status %d", resp.StatusCode) // a failure of your choosing
		}
	}
	h.Done(b, balancer.Result{Latency: time.Since(start), Err: err})
}

// clock is a Clock the example moves by hand.
type clock struct{ t time.Time }

func (c *clock) Now() time.Time { return c.t }

// A refused connection takes a backend out at once; it comes back when its
// ejection time ends. With a Clock of its own the Balancer starts no
// goroutine: Apply applies what is pending or due, as the scenario
// simulator does.
func Example() {
	c := &clock{t: time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)}
	h, err := health.New(rr.New(rr.WithRand(func() uint64 { return 0 })), health.Config{
		Clock:    c,
		OnChange: func(ch health.Change) { fmt.Println(ch.At.Format("15:04:05"), ch) },
	})
	if err != nil {
		panic(err)
	}
	bs := balancer.Endpoints("10.0.0.1:8080", "10.0.0.2:8080", "10.0.0.3:8080")
	if err := h.Update(bs); err != nil {
		panic(err)
	}
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	h.Done(bs[1], balancer.Result{Err: refused})
	h.Apply()
	for range 4 {
		b, _ := h.Pick(balancer.Request{})
		fmt.Println("pick", b.ID())
		h.Done(b, balancer.Result{Latency: 20 * time.Millisecond})
	}
	c.t = c.t.Add(30 * time.Second) // the default base ejection time
	h.Apply()
	// Output:
	// 12:00:00 10.0.0.2:8080: up -> ejected (connection refused): dial tcp: connect: connection refused
	// pick 10.0.0.1:8080
	// pick 10.0.0.3:8080
	// pick 10.0.0.1:8080
	// pick 10.0.0.3:8080
	// 12:00:30 10.0.0.2:8080: ejected -> up (ejection ended)
}

// Results fed to Observe count like probes: Fall (3) failures take a
// backend down, Rise (2) passes bring it back. View shows where each
// backend stands.
func ExampleBalancer_Observe() {
	c := &clock{t: time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)}
	h, _ := health.New(rr.New(), health.Config{Clock: c})
	_ = h.Update(balancer.Endpoints("10.0.0.1:8080", "10.0.0.2:8080"))
	sick := fmt.Errorf("status 503")
	for range 3 {
		h.Observe("10.0.0.2:8080", sick)
	}
	h.Apply()
	for _, st := range h.View().Backends {
		fmt.Println(st.ID, st.State, st.InSet, st.LastProbeErr)
	}
	// Output:
	// 10.0.0.1:8080 up true <nil>
	// 10.0.0.2:8080 down false status 503
}

// Drain takes a backend out gently: no new requests, those in flight
// finish. Enable brings it back.
func ExampleBalancer_Drain() {
	h, _ := health.New(rr.New(rr.WithRand(func() uint64 { return 0 })), health.Config{Clock: &clock{}})
	_ = h.Update(balancer.Endpoints("10.0.0.1:8080", "10.0.0.2:8080"))
	if err := h.Drain("10.0.0.1:8080"); err != nil {
		panic(err)
	}
	for range 2 {
		b, _ := h.Pick(balancer.Request{})
		fmt.Println(b.ID())
	}
	fmt.Println(h.Drain("10.0.0.9:8080"))
	// Output:
	// 10.0.0.2:8080
	// 10.0.0.2:8080
	// balancer: unknown backend "10.0.0.9:8080"
}

// A backend failing one request in three never fails five in a row, so
// consecutive-failure ejection leaves it in; failure-percentage ejection,
// with a threshold of 20%, takes it out at the end of the interval. The
// Clock is moved by hand and Apply makes the judgement.
func ExampleFailureRateCheck() {
	c := &clock{t: time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)}
	h, err := health.New(rr.New(rr.WithRand(func() uint64 { return 0 })), health.Config{
		Clock:       c,
		OnChange:    func(ch health.Change) { fmt.Println(ch.At.Format("15:04:05"), ch) },
		FailureRate: &health.FailureRateCheck{Threshold: 20}, // the rest: Envoy's defaults, MinimumHosts 3
	})
	if err != nil {
		panic(err)
	}
	bs := balancer.Endpoints("10.0.0.1:8080", "10.0.0.2:8080", "10.0.0.3:8080")
	if err := h.Update(bs); err != nil {
		panic(err)
	}
	for i := range 300 { // 100 requests each; every third one to 10.0.0.2 fails
		b, _ := h.Pick(balancer.Request{})
		var r balancer.Result
		if b == bs[1] && i%9 == 1 {
			r.Err = errors.New("503")
		}
		h.Done(b, r)
	}
	h.Apply()
	c.t = c.t.Add(health.DefaultFailureRateInterval)
	h.Apply()
	fmt.Println(h.View().Backends[1].State)
	// Output:
	// 12:00:10 10.0.0.2:8080: up -> ejected (failure rate): health: 34 of 100 requests failed in the interval, at or above the threshold of 20%
	// ejected
}
