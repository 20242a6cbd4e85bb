package collectives

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// sendRecorder is a Group whose sends never complete and are numbered in
// the order they were made; its receives wait until canceled.
type sendRecorder struct {
	rank, size int
	mu         sync.Mutex
	sends      []*recordedReq
}

type recordedReq struct {
	id       int
	done     chan struct{}
	once     sync.Once
	canceled bool
}

func (r *recordedReq) Wait(ctx context.Context) (int, error) {
	select {
	case <-r.done:
		return 0, context.Canceled
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

func (r *recordedReq) Cancel() { r.once.Do(func() { r.canceled = true; close(r.done) }) }

func (g *sendRecorder) Rank() int { return g.rank }
func (g *sendRecorder) Size() int { return g.size }

func (g *sendRecorder) Isend(peer, tag int, buf []byte) (Request, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	r := &recordedReq{id: len(g.sends), done: make(chan struct{})}
	g.sends = append(g.sends, r)
	return r, nil
}

func (g *sendRecorder) Irecv(peer, tag int, buf []byte) (Request, error) {
	return &recordedReq{id: -1, done: make(chan struct{})}, nil
}

// TestFireAllKeepsTheLatestSends: the abort and probe sends an Engine
// does not wait for are recorded, the latest maxLoose of them, all peers'
// of one broadcast together, and Close cancels those.
func TestFireAllKeepsTheLatestSends(t *testing.T) {
	for _, serialized := range []bool{false, true} {
		g := &sendRecorder{rank: 1, size: 4}
		e, err := New(g, Options{Serialized: serialized})
		require.NoError(t, err)
		const rounds = maxLoose/3 + 7 // 3 peers a round: past maxLoose
		for range rounds {
			e.fireAll([]byte("probe"))
		}
		total := 3 * rounds
		require.Len(t, g.sends, total)
		e.mu.Lock()
		loose := append([]Request(nil), e.loose...)
		e.mu.Unlock()
		require.Len(t, loose, maxLoose)
		for i, r := range loose {
			require.Equal(t, total-maxLoose+i, r.(*recordedReq).id, "serialized=%v: record %d", serialized, i)
		}
		require.NoError(t, e.Close())
		for _, r := range g.sends {
			require.Equal(t, r.id >= total-maxLoose, r.canceled, "serialized=%v: send %d", serialized, r.id)
		}
	}
}
