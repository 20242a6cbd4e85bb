package comm

import (
	"context"
	"fmt"

	"github.com/rdmago/rdmago/collectives"
)

// BcastVar broadcasts root's buf whose length the other ranks do not know
// (an encoded record, a file): root's length goes first, then the data.
// It returns root's data on every rank: buf itself at the root; elsewhere
// buf[:n] when buf has the capacity, else a new slice. It is one
// collective in c's order.
func BcastVar[T Element](ctx context.Context, c *Comm, buf []T, root int) ([]T, error) {
	var out []T
	err := c.collective(ctx, "BcastVar", func(ctx context.Context) error {
		n := []int64{int64(len(buf))}
		if err := collectives.Bcast(ctx, c.eng, n, root); err != nil {
			return err
		}
		if c.rank == root {
			out = buf
		} else if n[0] < 0 {
			return fmt.Errorf("%w: root %d announced %d elements", ErrMismatch, root, n[0])
		} else if int64(cap(buf)) >= n[0] {
			out = buf[:n[0]]
		} else {
			out = make([]T, n[0])
		}
		return collectives.Bcast(ctx, c.eng, out, root)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
