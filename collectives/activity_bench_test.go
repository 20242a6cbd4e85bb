package collectives

import "testing"

// BenchmarkActivityRecord is what the status record adds to one call:
// begin and end (a call that never waits long), and with its first wait
// for a peer (which reads the clock).
func BenchmarkActivityRecord(b *testing.B) {
	for _, waits := range []bool{false, true} {
		name := "fast"
		if waits {
			name = "waits"
		}
		b.Run(name, func(b *testing.B) {
			var a activity
			b.ReportAllocs()
			seq := uint32(0)
			for b.Loop() {
				seq++
				a.begin(seq, CollAllreduce, Ring)
				if waits {
					a.waiting(seq, 1, true)
				}
				a.end(seq)
			}
		})
	}
}
