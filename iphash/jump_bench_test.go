package iphash

import (
	"fmt"
	"testing"

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
