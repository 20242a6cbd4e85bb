package comm_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/bootstrap"
	"github.com/rdmago/rdmago/comm"
)

// A rank that leaves the job while the others join (it died after
// reaching the rendezvous, before the endpoints' fence): the others'
// Init fails naming it, and each puts a failure report naming it in the
// rendezvous, so that the launcher names the rank that left rather than
// the first of them to exit (which it sees first).
func TestInitReportsRankThatLeft(t *testing.T) {
	stores, err := bootstrap.NewMemory(3)
	require.NoError(t, err)
	defer func() {
		for _, s := range stores {
			s.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, stores[1].Close()) // rank 1 is gone
	errs := make(chan error, 2)
	for _, r := range []int{0, 2} {
		go func() {
			c, err := comm.Init(ctx, comm.Options{Store: stores[r], Rank: r, Size: 3, NoEnv: true, Transport: "tcp"})
			if err == nil {
				c.Close()
			}
			errs <- err
		}()
	}
	for range 2 {
		err := <-errs
		require.Error(t, err)
		assert.ErrorIs(t, err, bootstrap.ErrRankLeft)
		var be *bootstrap.Error
		if assert.True(t, errors.As(err, &be), "%v", err) {
			assert.Equal(t, []int{1}, be.Ranks, "%v", err)
		}
	}
	for _, r := range []int{0, 2} {
		v, err := stores[0].Get(ctx, bootstrap.FailureKey(r))
		require.NoError(t, err, "rank %d's failure report", r)
		f, ok := bootstrap.DecodeFailure(v)
		require.True(t, ok, "%q", v)
		assert.Equal(t, "lost", f.Kind)
		assert.Equal(t, []int{1}, f.Origins, "rank %d's report names rank 1", r)
	}
}
