package collectives_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/collectives"
	"github.com/rdmago/rdmago/collectives/coltest"
)

// eagerGroup adds EagerLimiter to a group and counts its sends.
type eagerGroup struct {
	collectives.Group
	limit int
	sent  *atomic.Int64
}

func (g eagerGroup) EagerLimit(int) int { return g.limit }

func (g eagerGroup) Isend(peer, tag int, buf []byte) (collectives.Request, error) {
	g.sent.Add(1)
	return g.Group.Isend(peer, tag, buf)
}

// bcastSends runs a two-rank bcast of n float32 from root 0 (the other
// rank expecting m), over groups reporting an eager limit (0: no
// EagerLimiter), and returns the root's sends and each rank's error; the
// receiver checks the data when the call succeeds.
func bcastSends(t *testing.T, limit, n, m int) (int64, []error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var sent [2]atomic.Int64
	errs := coltest.NewWorld(2, coltest.Options{}).Run(func(rank int, g collectives.Group) error {
		if limit > 0 {
			g = eagerGroup{g, limit, &sent[rank]}
		}
		e, err := collectives.New(g, collectives.Options{})
		if err != nil {
			return err
		}
		defer e.Close()
		buf := make([]float32, n)
		if rank == 1 {
			buf = make([]float32, m)
		}
		for i := range buf {
			if rank == 0 {
				buf[i] = float32(i)
			}
		}
		if err := collectives.Bcast(ctx, e, buf, 0); err != nil {
			return err
		}
		for i, v := range buf {
			if v != float32(i) {
				t.Errorf("rank %d: element %d is %v", rank, i, v)
				break
			}
		}
		return nil
	})
	return sent[0].Load(), errs
}

// TestInlineUpToEagerLimit: a payload that fits one eager message of the
// link with its header goes in that message, not as a header and a
// payload message (over tcp each message is a system call on both
// sides); a larger one still goes apart, and the default 8 KiB applies
// without the capability.
func TestInlineUpToEagerLimit(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		limit, n int
		want     int64
	}{
		{64 << 10, 4 << 10, 1},  // 16 KiB in one 64 KiB eager message
		{64 << 10, 16 << 10, 2}, // 64 KiB: no room for the header
		{64 << 10, 2 << 10, 1},  // 8 KiB: inline by default anyway
		{16 << 10, 4 << 10, 2},  // 16 KiB over a 16 KiB eager limit
		{4 << 10, 2 << 10, 1},   // a small limit never lowers the default
	} {
		sent, errs := bcastSends(t, c.limit, c.n, c.n)
		requireAllOK(t, errs)
		require.Equal(t, c.want, sent, "limit %d, %d bytes", c.limit, 4*c.n)
	}
}

// TestInlineMismatchNotTruncated: with inline payloads up to the eager
// limit, a receiver that expects another size still gets the whole
// header and reports the disagreement as a mismatch, not a truncation.
func TestInlineMismatchNotTruncated(t *testing.T) {
	t.Parallel()
	for _, nm := range [][2]int{{4 << 10, 8 << 10}, {15 << 10, 2}, {2, 15 << 10}} {
		_, errs := bcastSends(t, 64<<10, nm[0], nm[1])
		require.ErrorIs(t, errs[1], collectives.ErrMismatch, "%d against %d elements", nm[0], nm[1])
	}
}
