package lbetcd

import (
	"encoding/json"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/lbkit/lbkit/discovery"
	"github.com/lbkit/lbkit/health"
	"github.com/lbkit/lbkit/wrr"
)

// cpu returns the CPU time, user and system, this process has spent.
func cpu(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkUpdate measures what a change of the prefix costs from the
// decoded watch event to the picker's Update, through the Watcher's own
// path (records, Publisher, health ▶ wrr), with n keys under the prefix:
//
//   - change=1: one key's value changes (a weight), the common event: the
//     one record is parsed, the n endpoints are built and published.
//   - change=all: a list of the prefix (Start, or after a compaction):
//     every value is parsed and the set published.
//
// cpu-ns/op is the process's CPU time (getrusage) per update, GC
// included, which on a loaded machine ns/op (wall time) overstates.
func BenchmarkUpdate(b *testing.B) {
	for _, n := range []int{1000} {
		values := make([][]byte, n)
		keys := make([]string, n)
		for i := range n {
			keys[i] = fmt.Sprintf("/svc/%04d", i)
			values[i], _ = json.Marshal(Record{Address: fmt.Sprintf("10.0.%d.%d:8080", i/250, i%250+1), Weight: 1 + i%3, Zone: fmt.Sprintf("z%d", i%3)})
		}
		newWatcher := func(b *testing.B) *Watcher {
			h, err := health.New(wrr.New(), health.Config{})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { h.Close() })
			pub, err := discovery.New(h, discovery.Config{})
			if err != nil {
				b.Fatal(err)
			}
			return &Watcher{pub: pub}
		}
		b.Run(fmt.Sprintf("keys=%d/change=1", n), func(b *testing.B) {
			w := newWatcher(b)
			rs := newRecords(JSON, n)
			for i := range n {
				rs.put(nil, keys[i], values[i], int64(i+1))
			}
			if s := w.publish(rs, int64(n), true); s.Err != nil || len(s.Healthy) != n {
				b.Fatalf("first publish: %v, %d healthy", s.Err, len(s.Healthy))
			}
			alt := [][]byte{[]byte(`{"address":"10.0.0.1:8080","weight":5,"zone":"z0"}`), values[0]}
			b.ReportAllocs()
			c0, rev := cpu(b), int64(n)
			for b.Loop() {
				rev++
				rs.put(rs, keys[0], alt[rev%2], rev)
				if s := w.publish(rs, rev, false); s.Err != nil {
					b.Fatal(s.Err)
				}
			}
			b.ReportMetric(float64(cpu(b)-c0)/float64(b.N), "cpu-ns/op")
		})
		b.Run(fmt.Sprintf("keys=%d/change=all", n), func(b *testing.B) {
			w := newWatcher(b)
			b.ReportAllocs()
			c0 := cpu(b)
			for i := 0; b.Loop(); i++ {
				rs := newRecords(JSON, n)
				for j := range n {
					rs.put(nil, keys[j], values[j], int64(i*n+j))
				}
				if s := w.publish(rs, int64(i*n+n), true); s.Err != nil {
					b.Fatal(s.Err)
				}
			}
			b.ReportMetric(float64(cpu(b)-c0)/float64(b.N), "cpu-ns/op")
		})
	}
}
