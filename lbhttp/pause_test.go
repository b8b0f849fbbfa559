//go:build unix

package lbhttp_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/health"
	"github.com/lbkit/lbkit/lbhttp"
	"github.com/lbkit/lbkit/rr"
)

// pauseChildEnv, when set in the environment, makes TestPausedProxy the
// child process of its own run: the backends, and the hand that stops and
// continues the test's process, whose pid the variable holds.
const pauseChildEnv = "LBKIT_PAUSE_CHILD"

// pauseBody is what each backend of the paused-proxy test answers: two
// halves, the second sent 25 ms after the first, so that a pause finds
// some attempts waiting for their headers and some for their bodies.
var pauseBody = strings.Repeat("x", 512) + strings.Repeat("y", 512)

// pauseChild runs the child of TestPausedProxy: three backends on
// loopback, which answer each request with its headers and first half
// after 25 ms and the second half 25 ms later; their addresses on stdout;
// then, for each line "pause <ms>" read from stdin, a SIGSTOP to the
// parent, that long a sleep, a SIGCONT and the line "resumed". It returns
// when stdin closes.
func pauseChild(parent int) {
	var addrs []string
	for range 3 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			fmt.Println("error", err)
			return
		}
		addrs = append(addrs, l.Addr().String())
		go func() {
			_ = http.Serve(l, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				time.Sleep(25 * time.Millisecond)
				w.Header().Set("Content-Length", strconv.Itoa(len(pauseBody)))
				_, _ = io.WriteString(w, pauseBody[:512])
				w.(http.Flusher).Flush()
				time.Sleep(25 * time.Millisecond)
				_, _ = io.WriteString(w, pauseBody[512:])
			}))
		}()
	}
	fmt.Println("backends", strings.Join(addrs, ","))
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		ms, ok := strings.CutPrefix(in.Text(), "pause ")
		d, err := strconv.Atoi(ms)
		if !ok || err != nil {
			continue
		}
		// SIGCONT follows whatever happens: nothing between the two
		// calls can fail but the sleep.
		_ = syscall.Kill(parent, syscall.SIGSTOP)
		time.Sleep(time.Duration(d) * time.Millisecond)
		_ = syscall.Kill(parent, syscall.SIGCONT)
		fmt.Println("resumed")
	}
}

// pauseFeedback counts what the Transport charges the backends: failures,
// and the timeouts among them.
type pauseFeedback struct {
	*health.Balancer
	failures, timeouts atomic.Int32
	mu                 sync.Mutex
	errs               []string
}

func (f *pauseFeedback) Done(b balancer.Backend, r balancer.Result) {
	if !r.Abandoned() && r.Err != nil {
		f.failures.Add(1)
		if isTimeoutErr(r.Err) {
			f.timeouts.Add(1)
		}
		f.mu.Lock()
		if len(f.errs) < 10 {
			f.errs = append(f.errs, b.ID()+": "+r.Err.Error())
		}
		f.mu.Unlock()
	}
	f.Balancer.Done(b, r)
}

func isTimeoutErr(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestPausedProxy is issue 24's test of a proxy that cannot run for a
// moment (a GC pause, CPU throttling, a stopped process): three healthy
// backends in a child process answer every request in 50 ms; the proxy
// (timeouts of 1 s, health's passive checks) and 50 clients run in the
// test's process, which the child stops with SIGSTOP for 1.5 s, twice,
// while the clients send GETs back to back. (The timeouts are twenty
// times the backends' answers, so that with the race detector on, two
// busy loops beside and the machine shared, a healthy answer does not
// reach them: at 400 ms some did, pauses or not.) The backends' answers arrive
// during the pauses; when the proxy runs again its timers, whose times
// passed meanwhile, must not call them timeouts: no client request fails,
// no failure is charged to a backend, and nothing is ejected.
func TestPausedProxy(t *testing.T) {
	if s := os.Getenv(pauseChildEnv); s != "" {
		parent, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("%s=%q", pauseChildEnv, s)
		}
		pauseChild(parent)
		os.Exit(0)
	}
	const (
		clients = 50
		timeout = time.Second
		pause   = 1500 * time.Millisecond
		pauses  = 2
	)
	exe, err := os.Executable()
	require.NoError(t, err)
	child := exec.Command(exe, "-test.run=^TestPausedProxy$")
	child.Env = append(os.Environ(), fmt.Sprintf("%s=%d", pauseChildEnv, os.Getpid()))
	child.Stderr = os.Stderr
	stdin, err := child.StdinPipe()
	require.NoError(t, err)
	stdout, err := child.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, child.Start())
	t.Cleanup(func() {
		_ = stdin.Close()
		_ = child.Wait()
	})
	out := bufio.NewScanner(stdout)
	require.True(t, out.Scan(), "the child said nothing")
	list, ok := strings.CutPrefix(out.Text(), "backends ")
	require.True(t, ok, "the child said %q", out.Text())

	var ejections atomic.Int32
	h, err := health.New(rr.New(), health.Config{OnChange: func(c health.Change) {
		if c.New == health.Ejected {
			ejections.Add(1)
		}
	}})
	require.NoError(t, err)
	require.NoError(t, h.Update(balancer.Endpoints(strings.Split(list, ",")...)))
	require.NoError(t, h.Start(t.Context()))
	t.Cleanup(func() { _ = h.Close() })
	fb := &pauseFeedback{Balancer: h}
	rp, err := lbhttp.NewProxy(fb, lbhttp.Config{AttemptTimeout: timeout, IdleTimeout: timeout, ErrorLog: quietLog()})
	require.NoError(t, err)
	plog := &proxyLog{}
	rp.ErrorLog = log.New(plog, "", 0)
	// A response ReverseProxy aborts (its body failed after the headers
	// were written) reaches the client as a bare EOF, which the client's
	// transport may retry on its own: count the aborts where they happen.
	var aborted atomic.Int32
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				aborted.Add(1)
				panic(v)
			}
		}()
		rp.ServeHTTP(w, r)
	}))
	proxy.Config.ErrorLog = log.New(io.Discard, "", 0) // the aborts' panics
	t.Cleanup(func() {
		proxy.Close()
		rp.Transport.(*lbhttp.Transport).CloseIdleConnections()
	})

	var stop atomic.Bool
	var requests, failed atomic.Int32
	var mu sync.Mutex
	var failures []string
	var wg sync.WaitGroup
	for c := range clients {
		hc := clientFrom(t, fmt.Sprintf("127.0.0.%d", 10+c))
		wg.Go(func() {
			for i := 0; i < 10000 && !stop.Load(); i++ {
				resp, err := hc.Get(proxy.URL)
				if err == nil {
					var body []byte
					body, err = io.ReadAll(resp.Body)
					_ = resp.Body.Close()
					switch {
					case err != nil:
					case resp.StatusCode != http.StatusOK:
						err = fmt.Errorf("status %d", resp.StatusCode)
					case string(body) != pauseBody:
						err = fmt.Errorf("a body of %d bytes", len(body))
					}
				}
				requests.Add(1)
				if err != nil {
					failed.Add(1)
					mu.Lock()
					if len(failures) < 10 {
						failures = append(failures, err.Error())
					}
					mu.Unlock()
				}
			}
		})
	}
	for range pauses {
		time.Sleep(300 * time.Millisecond) // under way, the connections made
		_, err := fmt.Fprintf(stdin, "pause %d\n", pause.Milliseconds())
		require.NoError(t, err)
		require.True(t, out.Scan(), "the child did not resume the test")
		require.Equal(t, "resumed", out.Text())
	}
	time.Sleep(300 * time.Millisecond)
	stop.Store(true)
	wg.Wait()

	t.Logf("%d requests, %d failed, %d responses aborted; %d failures charged to the backends, %d of them timeouts; %d ejections",
		requests.Load(), failed.Load(), aborted.Load(), fb.failures.Load(), fb.timeouts.Load(), ejections.Load())
	assert.Zero(t, failed.Load(), "client requests failed: %q", failures)
	assert.Zero(t, aborted.Load(), "responses aborted after their headers: what the ReverseProxy logged: %q", plog.lines)
	assert.Zero(t, fb.timeouts.Load(), "timeouts charged to healthy backends: %q", fb.errs)
	assert.Zero(t, fb.failures.Load(), "failures charged to healthy backends: %q", fb.errs)
	assert.Zero(t, ejections.Load(), "healthy backends ejected")
}
