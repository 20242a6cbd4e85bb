package collectives

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDataHeaderFitsOneRingLine: a data message's header is 32 bytes, so a
// 16-byte payload makes a 48-byte message (the first line of a p2p shm
// ring message); aborts keep the 64-byte form with the mismatch fields.
func TestDataHeaderFitsOneRingLine(t *testing.T) {
	h := header{kind: kindData, alg: uint8(Ring), seq: 7, coll: uint8(CollAllgather), root: 3, count: 4, payload: 16}
	b := make([]byte, dataHdrLen+16)
	h.encode(b)
	var got header
	require.True(t, got.decode(b))
	assert.Equal(t, h, got)
	require.LessOrEqual(t, len(b), 48)

	a := header{kind: kindAbort, seq: 9, what: whatCount, rankA: 1, rankB: 2, valA: 5, valB: 6}
	ab := make([]byte, hdrLen)
	a.encode(ab)
	got = header{}
	require.True(t, got.decode(ab))
	assert.Equal(t, a, got)
	assert.False(t, got.decode(ab[:dataHdrLen]), "an abort cut to a data header's length is malformed")
}

// TestSuspectByOwn: a rank that hears of a disagreement between two other
// ranks names as the suspect the one whose call differs from its own; a
// rank that is itself one of the two is no third witness and names none
// (it named the lone rank that agrees with it, the culprit being itself).
func TestSuspectByOwn(t *testing.T) {
	own := &header{count: 4}
	m := newMismatch("count", 0, 4, 2, 5)
	suspectByOwn(m, own, 1)
	assert.Equal(t, 2, m.Suspect, "a third rank with 4 elements")

	m = newMismatch("count", 0, 4, 2, 5)
	suspectByOwn(m, &header{count: 5}, 2)
	assert.Equal(t, -1, m.Suspect, "rank 2 is one of the two")
	m = newMismatch("count", 2, 5, 0, 4)
	suspectByOwn(m, &header{count: 5}, 2)
	assert.Equal(t, -1, m.Suspect, "rank 2 is one of the two")
}
