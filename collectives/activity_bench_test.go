package collectives

import "testing"

// BenchmarkActivityRecord is what the status record adds to one call:
// begin, one wait for a peer, end.
func BenchmarkActivityRecord(b *testing.B) {
	var a activity
	b.ReportAllocs()
	seq := uint32(0)
	for b.Loop() {
		seq++
		a.begin(seq, CollAllreduce, Ring)
		a.waiting(seq, 1)
		a.end(seq)
	}
}
