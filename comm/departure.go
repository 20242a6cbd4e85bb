package comm

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/rdmago/rdmago/bootstrap"
	"github.com/rdmago/rdmago/collectives"
	"github.com/rdmago/rdmago/p2p"
)

// A rank that fails because of another one usually exits right away (a
// program's log.Fatal), and its links break or say goodbye: a rank that
// had not yet noticed the first failure then sees that survivor lost or
// closed, and would blame it. A lost peer's revoke tells every rank who
// was lost; a rank that closed early sends no such word. So, as rdmarun
// does to name where a failure began, a rank that sees another leave
// looks up the failure report the leaver put in the rendezvous before it
// returned its error (bootstrap.FailureKey): if the leaver had failed
// because rank X closed early, the error names X, as the leaver's did.
//
// Only an early close is followed. A report that a rank was lost may be
// the view of a rank that was itself cut off (in a one-way partition it
// notices first, and its report still reaches the rendezvous): the lost
// peers' revokes already carry those.

// departureLookup bounds the look-up. The report, when there is one, is
// in the rendezvous before the leaver's links break, so one round trip
// finds it; a leaver without a report (a killed rank) costs this long
// once, concurrently with the wait for an abort notice (abortGrace).
const departureLookup = 100 * time.Millisecond

// departure is the outcome of one look-up, shared by every error naming
// that rank.
type departure struct {
	done chan struct{}
	f    bootstrap.FailureReport // Origins in world ranks
	ok   bool
}

// departedRank is the world rank err says left (lost, or closed its
// endpoint or communicator), if any.
func (c *Comm) departedRank(err error) (int, bool) {
	if r, ok := PeerLost(err); ok {
		return r, true
	}
	var qc *p2p.PeerClosedError
	if errors.As(err, &qc) {
		return qc.Rank, true
	}
	var pc *collectives.PeerClosedError
	if errors.As(err, &pc) && pc.Rank >= 0 && pc.Rank < len(c.members) {
		return c.members[pc.Rank], true
	}
	return -1, false
}

// lookupDeparture starts (once per rank) the look-up of world rank r's
// failure report and returns its outcome, ready once done is closed. Only
// a rendezvous that reports its end (rdmarun's, bootstrap.Client) is
// asked: it answers a Get within the bound, and keeps reports in order.
func (w *world) lookupDeparture(r int) *departure {
	w.mu.Lock()
	defer w.mu.Unlock()
	if d, ok := w.departures[r]; ok {
		return d
	}
	d := &departure{done: make(chan struct{})}
	if w.departures == nil {
		w.departures = map[int]*departure{}
	}
	w.departures[r] = d
	if _, ok := w.store.(doneStore); !ok || r == w.ep.Rank() {
		close(d.done)
		return d
	}
	go func() {
		defer close(d.done)
		ctx, cancel := context.WithTimeout(context.Background(), departureLookup)
		defer cancel()
		v, err := w.store.Get(ctx, bootstrap.FailureKey(w.storeRank(r)))
		if err != nil {
			return
		}
		f, ok := bootstrap.DecodeFailure(v)
		if !ok || f.Kind != "closed" {
			return
		}
		// Origins are the rendezvous's ranks; keep those of this world
		// (a report from before a Shrink names ranks no longer in it)
		// other than the leaver and this rank.
		var os []int
		for _, o := range f.Origins {
			if wr := w.worldRankOf(o); wr >= 0 && wr != r && wr != w.ep.Rank() && !slices.Contains(os, wr) {
				os = append(os, wr)
			}
		}
		if len(os) == 1 {
			f.Origins, d.f, d.ok = os, f, true
		}
	}()
	return d
}

// blameOrigin rewrites err, which says world rank left (lost or closed),
// to name the rank that closed early and made the leaver fail, if the
// leaver reported one: ErrClosed with a *p2p.PeerClosedError naming it.
// Otherwise err is returned as it is.
func (w *world) blameOrigin(left int, d *departure, err error) error {
	<-d.done
	if !d.ok {
		return err
	}
	return fmt.Errorf("%w (rank %d left because of it: %v)", &p2p.PeerClosedError{Rank: d.f.Origins[0]}, left, err)
}

// reportJoinFailure puts a failure report for a join that failed because
// of other ranks: ranks that left the job before it completed
// (bootstrap.ErrRankLeft) or had not arrived by its deadline. A rank that
// dies while the others join is otherwise not named by the launcher,
// which sees the survivors exit first.
func reportJoinFailure(store bootstrap.Store, err error) {
	var be *bootstrap.Error
	if store == nil || !errors.As(err, &be) || len(be.Ranks) == 0 {
		return
	}
	if !errors.Is(be, bootstrap.ErrRankLeft) && !errors.Is(be, context.DeadlineExceeded) {
		return
	}
	me := store.Rank()
	f := bootstrap.FailureReport{Kind: "lost", Detail: err.Error()}
	for _, r := range be.Ranks {
		if r != me {
			f.Origins = append(f.Origins, r)
		}
	}
	if len(f.Origins) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), failureReportTimeout)
	defer cancel()
	_ = store.Put(ctx, bootstrap.FailureKey(me), f.Encode()) // the launcher's naming is best effort
}
