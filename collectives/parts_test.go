package collectives_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/collectives"
	"github.com/rdmago/rdmago/collectives/coltest"
)

// The engine sends and receives a payload that travels inline with its
// header, from partsMin (256 bytes) up, in parts (collectives.PartsSender,
// PartsReceiver): the header apart, the payload from and straight into its
// place. The results are those of the staging path, which smaller
// payloads, split ones (past InlineBytes) and a group without the
// capabilities still take.
func TestPartsReceive(t *testing.T) {
	cases := []struct {
		coll collectives.Collective
		alg  collectives.Algorithm
	}{
		{collectives.CollBcast, collectives.Binomial},
		{collectives.CollAllgather, collectives.Ring},
		{collectives.CollAlltoall, collectives.Linear},
		{collectives.CollAlltoall, collectives.Pairwise},
	}
	for _, tc := range cases {
		for _, capable := range []bool{true, false} {
			// Block bytes (int64 elements): below partsMin, at it, past
			// it, and past InlineBytes (1 KiB here).
			for _, block := range []int{200, 256, 1000, 2048} {
				name := fmt.Sprintf("%v/%v/parts=%v/block=%d", tc.coll, tc.alg, capable, block)
				t.Run(name, func(t *testing.T) {
					const n = 3
					w := coltest.NewWorld(n, coltest.Options{})
					eo := force(tc.coll, tc.alg)
					eo.InlineBytes = 1024
					errs := runWorldAs(w, eo, capable, func(ctx context.Context, e *collectives.Engine, rank int) error {
						return partsCase(ctx, e, tc.coll, rank, n, block/8)
					})
					requireAllOK(t, errs)
					if capable && block >= 256 && block <= 1024 {
						assert.Positive(t, w.Parts(), "parts receives posted")
						assert.Positive(t, w.PartsSent(), "parts sends")
					} else {
						assert.Zero(t, w.Parts(), "parts receives posted")
						assert.Zero(t, w.PartsSent(), "parts sends")
					}
				})
			}
		}
	}
}

// partsCase runs coll with count elements a block (the root's vector for
// a bcast) and checks every element (element i of rank r's block for rank
// d: r*1e6 + d*1e3 + i).
func partsCase(ctx context.Context, e *collectives.Engine, coll collectives.Collective, rank, n, count int) error {
	val := func(r, d, i int) int64 { return int64(r*1000000 + d*1000 + i) }
	switch coll {
	case collectives.CollBcast:
		buf := make([]int64, count)
		if rank == 0 {
			for i := range buf {
				buf[i] = val(0, 0, i)
			}
		}
		if err := collectives.Bcast(ctx, e, buf, 0); err != nil {
			return err
		}
		for i, v := range buf {
			if v != val(0, 0, i) {
				return fmt.Errorf("rank %d: element %d is %d, want %d", rank, i, v, val(0, 0, i))
			}
		}
	case collectives.CollAllgather:
		send, recv := make([]int64, count), make([]int64, n*count)
		for i := range send {
			send[i] = val(rank, 0, i)
		}
		if err := collectives.Allgather(ctx, e, send, recv); err != nil {
			return err
		}
		for r := range n {
			for i := range count {
				if v := recv[r*count+i]; v != val(r, 0, i) {
					return fmt.Errorf("rank %d: element %d of rank %d's block is %d, want %d", rank, i, r, v, val(r, 0, i))
				}
			}
		}
	case collectives.CollAlltoall:
		send, recv := make([]int64, n*count), make([]int64, n*count)
		for d := range n {
			for i := range count {
				send[d*count+i] = val(rank, d, i)
			}
		}
		if err := collectives.Alltoall(ctx, e, send, recv); err != nil {
			return err
		}
		for r := range n {
			for i := range count {
				if v := recv[r*count+i]; v != val(r, rank, i) {
					return fmt.Errorf("rank %d: element %d from rank %d is %d, want %d", rank, i, r, v, val(r, rank, i))
				}
			}
		}
	}
	return nil
}

// A peer whose inline payload is longer than this rank's does not fit the
// parts receive: the group places what fits, and the engine names the
// disagreement from the header it finds in the stage, as it does from a
// whole message.
func TestPartsReceiveMismatch(t *testing.T) {
	for _, longer := range []int{0, 1} {
		t.Run(fmt.Sprintf("longer=rank%d", longer), func(t *testing.T) {
			eo := force(collectives.CollBcast, collectives.Binomial)
			w := coltest.NewWorld(2, coltest.Options{})
			errs := runWorld(w, eo, func(ctx context.Context, e *collectives.Engine, rank int) error {
				n := 100
				if rank == longer {
					n = 120
				}
				return collectives.Bcast(ctx, e, make([]int64, n), 0)
			})
			require.Error(t, errs[1])
			var mm *collectives.MismatchError
			require.ErrorAs(t, errs[1], &mm, "rank 1: %v", errs[1])
			assert.ErrorContains(t, errs[1], "count")
			assert.Positive(t, w.Parts(), "parts receives posted")
		})
	}
}
