package p2p

import "testing"

// TestFastWritesCountOnce: the writes counted without ep.mu reach
// WriteSent beside those counted under it, once however often Stats reads
// them.
func TestFastWritesCountOnce(t *testing.T) {
	p := &peer{}
	p.stats.WriteSent = Counter{Msgs: 2, Bytes: 100}
	p.countFastWrite(5)
	p.countFastWrite(7)
	for range 3 {
		if got := p.writeSent(); got != (Counter{Msgs: 4, Bytes: 112}) {
			t.Fatalf("WriteSent %+v, want 4 messages of 112 bytes in all", got)
		}
	}
	p.countFastWrite(1)
	if got := p.writeSent(); got != (Counter{Msgs: 5, Bytes: 113}) {
		t.Fatalf("WriteSent %+v after one more write, want 5 messages of 113 bytes", got)
	}
}
