package p2p

import "testing"

// BenchmarkMatcherWindow is the matching of an OSU window: 64 receives
// posted, then 64 messages from one peer arriving in order (ns/op / 64 is
// one post and one match).
func BenchmarkMatcherWindow(b *testing.B) {
	var m matcher
	reqs := make([]Request, 64)
	for i := range reqs {
		reqs[i].pattern = envelope{ctx: 1, src: 1, tag: 7}
	}
	env := envelope{ctx: 1, src: 1, tag: 7}
	b.ReportAllocs()
	for b.Loop() {
		for i := range reqs {
			m.post(&reqs[i])
		}
		for range reqs {
			if m.arrive(env) == nil {
				b.Fatal("no match")
			}
		}
	}
}
