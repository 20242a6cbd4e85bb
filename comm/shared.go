package comm

import (
	"context"
	"time"

	"github.com/rdmago/rdmago/bootstrap"
	"github.com/rdmago/rdmago/collectives"
	"github.com/rdmago/rdmago/p2p"
)

// maxSharedRanks bounds the jobs that get a shared region: its algorithms
// read every rank's slot, which stops paying well before this.
const maxSharedRanks = 64

// sharedRegion is the world communicator's collectives.SharedRegion: a p2p
// window of provider memory that every rank maps (p2p.Window.Direct), when
// every rank of the job is on one host and talks shm. Only the world's
// Engine uses it (one Engine per region: its round ids start at 1).
type sharedRegion struct {
	ep   *p2p.Endpoint
	win  *p2p.Window
	mem  [][]byte
	spin time.Duration
}

// newSharedRegion makes the region (a collective over the world), or
// returns nil when the job does not qualify. Every rank reaches the same
// answer: transports are symmetric, and whether every mapping worked is
// agreed on through the store.
func newSharedRegion(ctx context.Context, ep *p2p.Endpoint, store bootstrap.Store, name string) (*sharedRegion, error) {
	n, me := ep.Size(), ep.Rank()
	if n < 2 || n > maxSharedRanks {
		return nil, nil
	}
	for r := range n {
		if r != me && ep.Transport(r) != "shm" {
			return nil, nil
		}
	}
	win, err := ep.AllocWindow(ctx, collectives.SharedRegionBytes)
	if err != nil {
		return nil, err
	}
	s := &sharedRegion{ep: ep, win: win, mem: make([][]byte, n)}
	s.spin, _ = ep.WaitPolicy()
	ok := byte(1)
	for r := range n {
		if s.mem[r] = win.Direct(r); len(s.mem[r]) < collectives.SharedRegionBytes {
			ok = 0
		}
	}
	votes, err := bootstrap.Allgather(ctx, store, "comm/"+name+"/shared", []byte{ok})
	if err != nil {
		return nil, err
	}
	for _, v := range votes {
		if len(v) != 1 || v[0] != 1 {
			// The window's memory goes with the endpoint.
			return nil, nil
		}
	}
	return s, nil
}

func (s *sharedRegion) Mem(rank int) []byte     { return s.mem[rank] }
func (s *sharedRegion) Failed() <-chan struct{} { return s.ep.Failed() }
func (s *sharedRegion) Err() error              { return s.ep.Err() }

// Pause follows the endpoint's wait policy: spin while a rank has a core
// to itself, then give the CPU away (sched_yield), then sleep a little.
func (s *sharedRegion) Pause(waited time.Duration) {
	switch {
	case waited < s.spin:
	case waited < s.spin+2*time.Millisecond:
		osYield()
	default:
		time.Sleep(20 * time.Microsecond)
	}
}
