package errfmt

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestSameOp(t *testing.T) {
	for _, tc := range []struct {
		op, base string
		same     bool
	}{
		{"Allreduce", "allreduce", true},
		{"Iallreduce", "allreduce", true},
		{"AllreduceInto", "allreduce", true},
		{"AllgatherInPlace", "allgather", true},
		{"ReduceScatter", "reduce_scatter", true},
		{"Ireduce", "reduce", true},
		{"Reduce", "allreduce", false},
		{"Split", "allgather", false},
		{"Irecv", "recv", true},
		{"", "allreduce", false},
	} {
		assert.Equal(t, tc.same, SameOp(tc.op, tc.base), "%q %q", tc.op, tc.base)
	}
}

type frame struct{ err error }

func (f *frame) Error() string { return f.Tell(Said{}) }
func (f *frame) Tell(s Said) string {
	who := "rank 3"
	if s.Origin {
		who = "it"
	}
	return who + " did " + Tell(f.err, s)
}

func TestTell(t *testing.T) {
	leaf := errors.New("x")
	assert.Equal(t, "x", Tell(leaf, Said{Origin: true}))
	// A Teller is told; anything else prints itself, Tellers inside included.
	assert.Equal(t, "it did x", Tell(&frame{leaf}, Said{Origin: true}))
	assert.Equal(t, "w: rank 3 did x", Tell(fmt.Errorf("w: %w", &frame{leaf}), Said{Origin: true}))
	assert.Equal(t, "", Tell(nil, Said{}))
	assert.Equal(t, "a: b", Join("a", "b"))
	assert.Equal(t, "b", Join("", "b"))
	assert.Equal(t, "a", Join("a", ""))
}
