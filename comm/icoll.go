package comm

import (
	"context"

	"github.com/rdmago/rdmago/collectives"
)

// Non-blocking forms of the rest of the collective set (Ibarrier, Ibcast,
// Iallreduce, Ireduce, Iallgather, IreduceScatter and Ialltoall are in
// coll.go). Each starts the collective of the same name without the I as
// the communicator's next collective, in the background (a small one
// starts once waited for, tested or left unclaimed for a moment: see
// docs/comm.md), and returns its request: arguments, results, errors and mismatch detection are those of
// the blocking form, reported by the request's Wait or Test. Buffers and
// counts belong to the request until it completes.

// IallreduceInto starts an AllreduceInto.
func IallreduceInto[T Element](ctx context.Context, c *Comm, send, recv []T, op Op) (*Request, error) {
	return c.start(ctx, "IallreduceInto", nbytes(send), allreduceInto(c, send, recv, op))
}

// IreduceInto starts a ReduceInto.
func IreduceInto[T Element](ctx context.Context, c *Comm, send, recv []T, op Op, root int) (*Request, error) {
	return c.start(ctx, "IreduceInto", nbytes(send), reduceInto(c, send, recv, op, root))
}

// IallgatherInPlace starts an AllgatherInPlace.
func IallgatherInPlace[T Element](ctx context.Context, c *Comm, buf []T) (*Request, error) {
	return c.start(ctx, "IallgatherInPlace", nbytes(buf), allgatherInPlace(c, buf))
}

// Iallgatherv starts an Allgatherv.
func Iallgatherv[T Element](ctx context.Context, c *Comm, send, recv []T, counts []int) (*Request, error) {
	return c.start(ctx, "Iallgatherv", nbytes(recv), func(ctx context.Context) error {
		return collectives.Allgatherv(ctx, c.eng, send, recv, counts)
	})
}

// IreduceScatterInPlace starts a ReduceScatterInPlace.
func IreduceScatterInPlace[T Element](ctx context.Context, c *Comm, buf []T, op Op) (*Request, error) {
	return c.start(ctx, "IreduceScatterInPlace", nbytes(buf), reduceScatterInPlace(c, buf, op))
}

// Igather starts a Gather.
func Igather[T Element](ctx context.Context, c *Comm, send, recv []T, root int) (*Request, error) {
	return c.start(ctx, "Igather", max(nbytes(send), nbytes(recv)), func(ctx context.Context) error {
		return collectives.Gather(ctx, c.eng, send, recv, root)
	})
}

// Igatherv starts a Gatherv.
func Igatherv[T Element](ctx context.Context, c *Comm, send, recv []T, counts []int, root int) (*Request, error) {
	return c.start(ctx, "Igatherv", max(nbytes(send), nbytes(recv)), func(ctx context.Context) error {
		return collectives.Gatherv(ctx, c.eng, send, recv, counts, root)
	})
}

// Iscatter starts a Scatter.
func Iscatter[T Element](ctx context.Context, c *Comm, send, recv []T, root int) (*Request, error) {
	return c.start(ctx, "Iscatter", max(nbytes(send), nbytes(recv)), func(ctx context.Context) error {
		return collectives.Scatter(ctx, c.eng, send, recv, root)
	})
}

// Iscatterv starts a Scatterv.
func Iscatterv[T Element](ctx context.Context, c *Comm, send []T, counts []int, recv []T, root int) (*Request, error) {
	return c.start(ctx, "Iscatterv", max(nbytes(send), nbytes(recv)), func(ctx context.Context) error {
		return collectives.Scatterv(ctx, c.eng, send, counts, recv, root)
	})
}

// IalltoallInPlace starts an AlltoallInPlace.
func IalltoallInPlace[T Element](ctx context.Context, c *Comm, buf []T) (*Request, error) {
	return c.start(ctx, "IalltoallInPlace", nbytes(buf), alltoallInPlace(c, buf))
}

// Ialltoallv starts an Alltoallv.
func Ialltoallv[T Element](ctx context.Context, c *Comm, send []T, scounts []int, recv []T, rcounts []int) (*Request, error) {
	return c.start(ctx, "Ialltoallv", max(nbytes(send), nbytes(recv)), func(ctx context.Context) error {
		return collectives.Alltoallv(ctx, c.eng, send, scounts, recv, rcounts)
	})
}

// Iscan starts a Scan.
func Iscan[T Element](ctx context.Context, c *Comm, buf []T, op Op) (*Request, error) {
	return c.start(ctx, "Iscan", nbytes(buf), func(ctx context.Context) error { return collectives.Scan(ctx, c.eng, buf, op) })
}

// IscanInto starts a ScanInto.
func IscanInto[T Element](ctx context.Context, c *Comm, send, recv []T, op Op) (*Request, error) {
	return c.start(ctx, "IscanInto", nbytes(send), into(c, send, recv, op, collectives.Scan[T]))
}

// Iexscan starts an Exscan.
func Iexscan[T Element](ctx context.Context, c *Comm, buf []T, op Op) (*Request, error) {
	return c.start(ctx, "Iexscan", nbytes(buf), func(ctx context.Context) error { return collectives.Exscan(ctx, c.eng, buf, op) })
}

// IexscanInto starts an ExscanInto.
func IexscanInto[T Element](ctx context.Context, c *Comm, send, recv []T, op Op) (*Request, error) {
	return c.start(ctx, "IexscanInto", nbytes(send), into(c, send, recv, op, collectives.Exscan[T]))
}
