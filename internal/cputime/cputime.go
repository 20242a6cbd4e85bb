package cputime

import "testing"

// Report adds the metric cpu-ns/op to b: the thread's CPU time since cpu0
// (a Thread reading) over b.N. It reports nothing when cpu0 is unknown.
func Report(b *testing.B, cpu0 int64) {
	if cpu0 < 0 {
		return
	}
	if now := Thread(); now >= 0 {
		b.ReportMetric(float64(now-cpu0)/float64(b.N), "cpu-ns/op")
	}
}
