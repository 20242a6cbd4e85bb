package collectives_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/collectives"
	"github.com/rdmago/rdmago/collectives/coltest"
)

// recvOrder is a Group that records, in order, the receives it posts and
// the waits for them that return, by tag.
type recvOrder struct {
	collectives.Group
	mu     *sync.Mutex
	events *[]recvEvent
}

type recvEvent struct {
	wait bool // false: Irecv posted
	tag  int
}

func (g recvOrder) note(ev recvEvent) {
	g.mu.Lock()
	*g.events = append(*g.events, ev)
	g.mu.Unlock()
}

func (g recvOrder) Irecv(peer, tag int, buf []byte) (collectives.Request, error) {
	g.note(recvEvent{tag: tag})
	r, err := g.Group.Irecv(peer, tag, buf)
	if err != nil {
		return nil, err
	}
	return orderedReq{Request: r, g: g, tag: tag}, nil
}

type orderedReq struct {
	collectives.Request
	g   recvOrder
	tag int
}

func (r orderedReq) Wait(ctx context.Context) (int, error) {
	n, err := r.Request.Wait(ctx)
	if err == nil {
		r.g.note(recvEvent{wait: true, tag: r.tag})
	}
	return n, err
}

// TestSplitPayloadReceivePostedWithHeader: a payload larger than
// InlineBytes travels as its own message after the header, and the
// receiver, which knows its size, posts its receive together with the
// header's. Posted only once the header was in, the receive found the
// payload arrived already: over p2p an unexpected message (copied twice;
// for a rendezvous one, the transfer waited for the receiver's next turn).
// The result must still be right, and a sender whose size disagrees must
// still be reported as a mismatch.
func TestSplitPayloadReceivePostedWithHeader(t *testing.T) {
	t.Parallel()
	const n = 4 << 10 // float64s: 32 KiB, past the default 8 KiB inline
	var mu sync.Mutex
	var events []recvEvent
	w := coltest.NewWorld(2, coltest.Options{})
	errs := w.Run(func(rank int, g collectives.Group) error {
		if rank == 1 {
			g = recvOrder{Group: g, mu: &mu, events: &events}
		}
		e, err := collectives.New(g, force(collectives.CollBcast, collectives.Binomial))
		if err != nil {
			return err
		}
		defer e.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		buf := make([]float64, n)
		if rank == 0 {
			for i := range buf {
				buf[i] = float64(i) + 0.5
			}
		}
		if err := collectives.Bcast(ctx, e, buf, 0); err != nil {
			return err
		}
		for i, v := range buf {
			if v != float64(i)+0.5 {
				t.Errorf("rank %d: element %d = %v", rank, i, v)
				break
			}
		}
		return nil
	})
	requireAllOK(t, errs)
	mu.Lock()
	defer mu.Unlock()
	// The payload's receive (tag|1) is posted before the header's wait
	// (tag, even) returns.
	payload, headerDone := -1, -1
	for i, ev := range events {
		if !ev.wait && ev.tag&1 == 1 && payload < 0 {
			payload = i
		}
		if ev.wait && ev.tag&1 == 0 && headerDone < 0 {
			headerDone = i
		}
	}
	require.GreaterOrEqual(t, payload, 0, "no payload receive: %v", events)
	require.Less(t, payload, headerDone, "the payload's receive was posted after the header arrived: %v", events)

	// Sizes that disagree, both past the inline size: a mismatch, not a hang.
	w = coltest.NewWorld(2, coltest.Options{})
	errs = w.Run(func(rank int, g collectives.Group) error {
		e, err := collectives.New(g, force(collectives.CollBcast, collectives.Binomial))
		if err != nil {
			return err
		}
		defer e.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		return collectives.Bcast(ctx, e, make([]float64, n+rank*n), 0)
	})
	var mm *collectives.MismatchError
	require.ErrorAs(t, errs[1], &mm)
}
