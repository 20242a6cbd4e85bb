package p2p_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/p2p"
	"github.com/rdmago/rdmago/p2p/p2ptest"
)

// TestReleaseAll: ReleaseAll recycles every completed request of a slice
// that mixes two endpoints' requests and nil entries, so a window of
// Isends and Irecvs released that way allocates no request; a request
// that has not completed is left alone and still completes with its data.
func TestReleaseAll(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	eps, err := p2ptest.Start(ctx, 2, p2ptest.Options{Provider: "shm"})
	require.NoError(t, err)
	defer p2ptest.Close(eps)

	// Pending: released, then matched.
	buf := make([]byte, 8)
	r, err := eps[1].Irecv(0, 7, buf)
	require.NoError(t, err)
	p2p.ReleaseAll([]*p2p.Request{nil, r})
	require.NoError(t, eps[0].Send(ctx, 1, 7, pattern(8, 3)))
	st, err := r.Wait(ctx)
	require.NoError(t, err)
	require.Equal(t, 8, st.Count)
	require.True(t, bytes.Equal(pattern(8, 3), buf), "received %v", buf)
	p2p.ReleaseAll([]*p2p.Request{r})

	const window = 8
	s, in := pattern(8, 5), make([]byte, 8)
	reqs := make([]*p2p.Request, 0, 2*window+1)
	var loopErr error
	step := func() {
		reqs = reqs[:0]
		for range window {
			rr, err := eps[1].Irecv(0, 1, in)
			rs, err2 := eps[0].Isend(1, 1, s)
			if err != nil || err2 != nil {
				loopErr = cmpErr(err, err2)
				return
			}
			reqs = append(reqs, rr, rs) // the endpoints alternate
		}
		reqs = append(reqs, nil)
		for _, q := range reqs[:2*window] {
			if _, err := q.Wait(ctx); err != nil {
				loopErr = err
				return
			}
		}
		p2p.ReleaseAll(reqs)
	}
	step()
	require.NoError(t, loopErr)
	if raceOn {
		t.Skip("the race detector allocates on its own")
	}
	allocs := testing.AllocsPerRun(50, step)
	require.NoError(t, loopErr)
	// Without recycling, every window allocates its 16 requests.
	require.Less(t, allocs, 4.0, "allocations per window of %d messages", window)
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// TestRequestExt: what SetExt attaches to a request comes back with it
// when the endpoint recycles it (Release, ReleaseAll, in any order), so
// that a layer above can keep its own request object with ours; a request
// never recycled has none.
func TestRequestExt(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	eps, err := p2ptest.Start(ctx, 2, p2ptest.Options{Provider: "shm"})
	require.NoError(t, err)
	defer p2ptest.Close(eps)

	const window = 8
	s, in := pattern(8, 5), make([]byte, 8)
	post := func() []*p2p.Request {
		var reqs []*p2p.Request
		for range window {
			rr, err := eps[1].Irecv(0, 1, in)
			require.NoError(t, err)
			rs, err := eps[0].Isend(1, 1, s)
			require.NoError(t, err)
			reqs = append(reqs, rr, rs)
		}
		require.NoError(t, p2p.WaitAll(ctx, reqs...))
		return reqs
	}
	reqs := post()
	want := map[any]bool{}
	for i, r := range reqs {
		require.Nil(t, r.Ext(), "a new request")
		v := new(int)
		*v = i
		r.SetExt(v)
		want[v] = true
	}
	p2p.ReleaseAll(reqs[:window])
	for _, r := range reqs[window:] {
		r.Release()
	}
	got := map[any]bool{}
	for _, r := range post() {
		got[r.Ext()] = true
	}
	require.Equal(t, want, got, "the recycled requests' values")
}
