package consistent

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/lbkit/lbkit/balancer"
)

// harnessKey is the i-th key of balancertest.Benchmark's harness (a copy:
// the kit does not export it).
func harnessKey(i int) string {
	switch i % 4 {
	case 0:
		return fmt.Sprintf("192.0.2.%d", i%256)
	case 1:
		return fmt.Sprintf("198.51.%d.%d:%d", (i/256)%256, i%256, 1024+i%60000)
	case 2:
		return fmt.Sprintf("[2001:db8::%x]:443", i)
	default:
		return fmt.Sprintf("2001:db8:%x::1", i)
	}
}

// peerMaglev is the lookup of dgryski/go-maglev (maglev.go, Table.Lookup:
// "return t.lookup[key%t.m]"), over an []int table; its population is not
// what is measured, so it holds lbkit's own table.
type peerMaglev struct {
	lookup []int
	m      uint64
}

func (t *peerMaglev) Lookup(key uint64) int { return t.lookup[key%t.m] }

// BenchmarkVsPeerMaglev is issue 28's side-by-side row for Maglev: Pick
// through the balancer.Balancer interface on the harness's keys, beside
// go-maglev's Lookup over xxhash of the key (which returns an index, and
// knows no Avoid and no Attempt), at 4, 64 and 1024 backends, serial and
// parallel, in one run. cpu-ns/op is CPU time per op, which the shared
// machine's waits for a core do not inflate.
func BenchmarkVsPeerMaglev(b *testing.B) {
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = harnessKey(i)
	}
	for _, n := range []int{4, 64, 1024} {
		m := NewMaglev()
		if err := m.Update(balancer.Endpoints(addrs(n)...)); err != nil {
			b.Fatal(err)
		}
		s := m.snap.Load()
		peer := &peerMaglev{lookup: make([]int, s.size), m: s.size}
		for i := range peer.lookup {
			peer.lookup[i] = int(s.owner[i])
		}
		var bal balancer.Balancer = m
		algos := []struct {
			name string
			f    func(string) int
		}{
			{"go-maglev", func(k string) int { return peer.Lookup(xxhash.Sum64String(k)) }},
			{"maglev", func(k string) int {
				if _, err := bal.Pick(balancer.Request{Key: k}); err != nil {
					panic(err)
				}
				return 0
			}},
		}
		for _, a := range algos {
			benchPeer(b, fmt.Sprintf("n=%d", n), a.name, keys, a.f)
		}
	}
}

// benchPeer runs f over the 1024 keys, serial and parallel.
func benchPeer(b *testing.B, prefix, algo string, keys []string, f func(string) int) {
	b.Run(prefix+"/mode=serial/algo="+algo, func(b *testing.B) {
		b.ReportAllocs()
		defer reportCPU(b)()
		i, sum := 0, 0
		for b.Loop() {
			sum += f(keys[i&1023])
			i++
		}
		_ = sum
	})
	b.Run(prefix+"/mode=parallel/algo="+algo, func(b *testing.B) {
		b.ReportAllocs()
		defer reportCPU(b)()
		b.RunParallel(func(pb *testing.PB) {
			i, sum := 0, 0
			for pb.Next() {
				sum += f(keys[i&1023])
				i++
			}
			_ = sum
		})
	})
}

// reportCPU returns a func that reports the process's CPU time (user and
// system, all threads) per op since reportCPU was called, as cpu-ns/op.
// On a machine shared with other work, wall time per op counts the time
// the benchmark waited for a core; CPU time does not.
func reportCPU(b *testing.B) func() {
	start := cpuTime()
	return func() {
		b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkBoundedFloor puts a price on the per-request count that bounded
// loads need (issue 28: the best peer, buraksezer/consistent, keeps none).
// On the harness's keys, at 4, 64 and 1024 backends, serial and parallel,
// in one run:
//
//   - ring: the plain ring's Pick, no count (the peer's shape);
//   - ring+count: the same lookup plus the cheapest count there is, one
//     padded atomic per backend incremented at Pick and decremented at
//     Done by an index the caller carries (no lookup by ID, no total, no
//     capacity check): the floor of any counting ring;
//   - ring-bounded: Ring with WithBoundedLoad(1.25), Pick and Done through
//     the interfaces, as a proxy calls them: the counter, the ring's total,
//     the capacity check and Done's lookup of the backend's counter by ID.
func BenchmarkBoundedFloor(b *testing.B) {
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = harnessKey(i)
	}
	for _, n := range []int{4, 64, 1024} {
		plain, bounded := NewRing(), NewRing(WithBoundedLoad(1.25))
		for _, r := range []*Ring{plain, bounded} {
			if err := r.Update(balancer.Endpoints(addrs(n)...)); err != nil {
				b.Fatal(err)
			}
		}
		s := plain.snap.Load()
		counts := make([]balancer.InFlight, n)
		var bal balancer.Balancer = bounded
		fb := bal.(balancer.Feedback)
		var pl balancer.Balancer = plain
		algos := []struct {
			name string
			f    func(string) int
		}{
			{"ring", func(k string) int {
				if _, err := pl.Pick(balancer.Request{Key: k}); err != nil {
					panic(err)
				}
				return 0
			}},
			{"ring+count", func(k string) int {
				o := s.owner[s.search(xxhash.Sum64String(k))]
				counts[o].Inc()
				counts[o].Dec()
				return int(o)
			}},
			{"ring-bounded", func(k string) int {
				got, err := bal.Pick(balancer.Request{Key: k})
				if err != nil {
					panic(err)
				}
				fb.Done(got, balancer.Result{})
				return 0
			}},
		}
		for _, a := range algos {
			benchPeer(b, fmt.Sprintf("n=%d", n), a.name, keys, a.f)
		}
	}
}
