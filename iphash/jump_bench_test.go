package iphash

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/lbkit/lbkit/balancer"
)

// jump is Lamping and Veach's jump consistent hash ("A Fast, Minimal Memory,
// Consistent Hash Algorithm", 2014), as dgryski/go-jump writes it: the
// floor iphash is compared with.
func jump(key uint64, buckets int) int {
	var b, j int64 = -1, 0
	for j < int64(buckets) {
		b = j
		key = key*2862933555777941757 + 1
		j = int64(float64(b+1) * (float64(int64(1)<<31) / float64((key>>33)+1)))
	}
	return int(b)
}

// BenchmarkVsJump compares a Pick with an IPv4 client address as key, on a
// *Picker of four backends, with the cheapest way a Go peer maps a key:
// jump hash over xxhash of the key string, which parses nothing (and so
// maps "192.0.2.1:5000" and "192.0.2.1:5001" apart). Keys cycle through
// 1024 addresses made ahead of time, as in balancertest.Benchmark.
func BenchmarkVsJump(b *testing.B) {
	for _, form := range []string{"v4", "v4port"} {
		keys := make([]string, 1024)
		for i := range keys {
			keys[i] = fmt.Sprintf("198.51.%d.%d", i>>8, i&255)
			if form == "v4port" {
				keys[i] += fmt.Sprintf(":%d", 1024+i*37)
			}
		}
		set := balancer.Endpoints("10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80", "10.0.0.4:80")
		p := New()
		if err := p.Update(set); err != nil {
			b.Fatal(err)
		}
		b.Run("form="+form+"/algo=jump-xxhash", func(b *testing.B) {
			b.ReportAllocs()
			i, sum := 0, 0
			for b.Loop() {
				sum += jump(xxhash.Sum64String(keys[i&1023]), len(set))
				i++
			}
			_ = sum
		})
		b.Run("form="+form+"/algo=iphash", func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if _, err := p.Pick(balancer.Request{Key: keys[i&1023]}); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

// mixedKey is the i-th key of balancertest.Benchmark's harness (a copy:
// the kit does not export it): IPv4, IPv4 and port, bracketed IPv6 and
// port, and bare IPv6, in turn.
func mixedKey(i int) string {
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

// BenchmarkVsJumpMixed is the side-by-side row of issue 28: Pick through
// the balancer.Balancer interface on the harness's mixed keys, beside jump
// hash over xxhash of the key string (the peer: dgryski/go-jump's
// jump.Hash(xxhash.Sum64String(key), n)), at 4, 64 and 1024 backends,
// serial and parallel, in one run, so that their ratio is measured on the
// same load.
func BenchmarkVsJumpMixed(b *testing.B) {
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = mixedKey(i)
	}
	for _, n := range []int{4, 64, 1024} {
		set := make([]balancer.Backend, n)
		for i := range set {
			set[i] = balancer.NewEndpoint(fmt.Sprintf("10.0.%d.%d:8080", i>>8, i&255), 1)
		}
		var p balancer.Balancer = New()
		if err := p.Update(set); err != nil {
			b.Fatal(err)
		}
		pick := map[string]func(string) int{
			"jump-xxhash": func(k string) int { return jump(xxhash.Sum64String(k), n) },
			"iphash": func(k string) int {
				if _, err := p.Pick(balancer.Request{Key: k}); err != nil {
					panic(err)
				}
				return 0
			},
		}
		for _, algo := range []string{"jump-xxhash", "iphash"} {
			f := pick[algo]
			b.Run(fmt.Sprintf("n=%d/mode=serial/algo=%s", n, algo), func(b *testing.B) {
				b.ReportAllocs()
				defer reportCPU(b)()
				i, sum := 0, 0
				for b.Loop() {
					sum += f(keys[i&1023])
					i++
				}
				_ = sum
			})
			b.Run(fmt.Sprintf("n=%d/mode=parallel/algo=%s", n, algo), func(b *testing.B) {
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
	}
}

// reportCPU returns a func that reports the process's CPU time (user and
// system, all threads) per op since reportCPU was called, as cpu-ns/op.
// On a machine shared with other work, wall time per op counts the time
// the benchmark waited for a core; CPU time does not, so the ratio of two
// benchmarks' cpu-ns/op moves much less between runs than their sec/op.
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
