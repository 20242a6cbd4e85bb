package comm

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A point-to-point call's record reads no clock when the call begins: a
// call is reported running since a reader first found it running, every
// later look at the same call reports that same time, and the next call
// is timed afresh. Before, begin read the clock (time.Since) for every
// Send and Recv, and the record reported when the call began, earlier
// than any look.
func TestP2PRecordTimesFromFirstLook(t *testing.T) {
	var r p2pRecord
	seq := r.begin(p2pRecv, 2)
	time.Sleep(5 * time.Millisecond) // the call began well before the look
	first := time.Now()
	o := r.opStatus("world")
	require.True(t, o.Running)
	require.Equal(t, "recv", o.Op)
	require.Equal(t, 2, o.Peer)
	require.False(t, o.Since.Before(first), "since %v, first look at %v", o.Since, first)
	time.Sleep(5 * time.Millisecond)
	again := r.opStatus("world")
	require.True(t, again.Since.Equal(o.Since), "a second look moved the time: %v, then %v", o.Since, again.Since)

	r.end(seq)
	require.False(t, r.opStatus("world").Running)
	seq = r.begin(p2pSend, 1)
	next := time.Now()
	o = r.opStatus("world")
	require.True(t, o.Running)
	require.Equal(t, "send", o.Op)
	require.False(t, o.Since.Before(next), "the next call kept the last one's time")
	r.end(seq)
}

// With calls of several goroutines, the record shows the call begun last
// running until that call ends, whatever the others do meanwhile: a call
// that ends after later ones (of its own slot in the record's ends, too)
// does not make the latest look running again, nor finished.
func TestP2PRecordLateEnds(t *testing.T) {
	var r p2pRecord
	long := r.begin(p2pRecv, 3) // a receive that waits while others run
	var last uint64
	for i := range 2 * p2pEnds {
		last = r.begin(p2pSend, i%4)
		require.True(t, r.opStatus("world").Running)
		r.end(last)
		require.False(t, r.opStatus("world").Running, "call %d ended", last)
	}
	r.end(long) // ends after 2*p2pEnds later calls; the last is of its slot
	o := r.opStatus("world")
	require.False(t, o.Running, "the latest call (%d) shows running after an older one (%d) ended", last, long)
	require.Equal(t, last, o.Seq)

	next := r.begin(p2pWait, 1)
	r.end(long) // an end seen twice changes nothing
	require.True(t, r.opStatus("world").Running, "call %d has not ended", next)
	r.end(next)
	require.False(t, r.opStatus("world").Running)
}

// A number set back by goroutines whose begins raced (a plain store that
// lost) never leaves an ended call showing running: a later call of the
// number's slot has ended, so the record reads as not running until the
// numbers pass it again.
func TestP2PRecordNumberSetBack(t *testing.T) {
	var r p2pRecord
	for range 3 * p2pEnds {
		r.end(r.begin(p2pSend, 1))
	}
	r.seq = 5 // the stale store of a begin that read 4 long ago
	seq := r.begin(p2pRecv, 2)
	r.end(seq)
	o := r.opStatus("world")
	require.False(t, o.Running, "call %d ended but shows running", seq)
	for range 3 * p2pEnds { // the numbers pass the old ones again
		r.end(r.begin(p2pSend, 1))
	}
	seq = r.begin(p2pWait, 3)
	require.True(t, r.opStatus("world").Running, "call %d has not ended", seq)
	r.end(seq)
	require.False(t, r.opStatus("world").Running)
}
