package softrc

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// settleLentLocked ends a tail's loan (PostSendLentPair): a request the
// link did not take keeps a copy, so the caller's later writes do not
// reach it; one it took keeps nothing, and a resend fails (gone); an
// entry completed and reused since (another sequence number) or flushed
// is left alone.
func TestSettleLent(t *testing.T) {
	q := &QP{}
	tail := []byte("abc")

	waiting := &swqe{seq: 5, tail: tail, lent: true}
	q.settleLentLocked(waiting, 5)
	tail[0] = 'X'
	assert.Equal(t, "abc", string(waiting.tail), "a request not taken keeps a copy")
	assert.False(t, waiting.lent)
	assert.False(t, waiting.gone)

	taken := &swqe{seq: 6, tail: tail, lent: true, sent: true}
	q.settleLentLocked(taken, 6)
	assert.Nil(t, taken.tail, "a request taken keeps nothing")
	assert.True(t, taken.gone)
	assert.False(t, taken.lent)

	reused := &swqe{seq: 9, tail: []byte("other"), lent: true}
	q.settleLentLocked(reused, 7)
	assert.Equal(t, "other", string(reused.tail), "another request in the slot is left alone")
	assert.True(t, reused.lent)

	q.settleLentLocked(nil, 1) // flushed at the post
}
