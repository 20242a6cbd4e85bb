package p2p

import "testing"

// TestFastWriteCountFolds: the writes counted without ep.mu reach
// WriteSent when the packed word nears either of its tops, and what is
// left when Stats folds it.
func TestFastWriteCountFolds(t *testing.T) {
	ep, p := &Endpoint{}, &peer{}
	p.fastWrites.Store((1<<23 - 1) << fastMsgShift)
	p.countFastWrite(ep, 5) // the message count reaches 1<<23: fold
	if got := p.stats.WriteSent; got.Msgs != 1<<23 || got.Bytes != 5 || p.fastWrites.Load() != 0 {
		t.Fatalf("after the message count's fold: WriteSent %+v, left %#x", got, p.fastWrites.Load())
	}
	p.fastWrites.Store(1<<39 - 3)
	p.countFastWrite(ep, 3) // the byte count reaches 1<<39: fold
	if got := p.stats.WriteSent; got.Msgs != 1<<23+1 || got.Bytes != 5+1<<39 || p.fastWrites.Load() != 0 {
		t.Fatalf("after the byte count's fold: WriteSent %+v, left %#x", got, p.fastWrites.Load())
	}
	p.countFastWrite(ep, 7)
	if got := p.stats.WriteSent; got.Msgs != 1<<23+1 {
		t.Fatalf("a write far from the tops folded: WriteSent %+v", got)
	}
	p.foldFastLocked()
	if got := p.stats.WriteSent; got.Msgs != 1<<23+2 || got.Bytes != 12+1<<39 {
		t.Fatalf("after Stats' fold: WriteSent %+v", got)
	}
}
