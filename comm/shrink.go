package comm

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/rdmago/rdmago/bootstrap"
	"github.com/rdmago/rdmago/p2p"
)

// Shrink builds a communicator of the ranks of c that are still in the
// job, as ULFM's MPI_Comm_shrink and NCCL's ncclCommShrink do: after an
// operation failed with ErrPeerLost (or ErrRevoked, or a peer that closed
// early), every surviving rank calls Shrink on c and gets the same new
// communicator, whose ranks are the survivors numbered 0..n-1 in c's
// order. It is a collective over the survivors; c itself stays failed
// (close it). A communicator without failures shrinks to a copy of itself.
//
// The new communicator shares nothing that could hang with c: it has its
// own endpoint, connections, context ids and collective engine (it is a
// world of its own, without the shared-memory region of a world made by
// Init), and keeps the rendezvous open until both are closed. Closing c
// does not close it.
//
// The ranks agree through the rendezvous, whose record of the ranks that
// left the job (bootstrap.LeftKey) is the failure detector: a rank that
// died or exited is left out, a live rank is waited for. A rank that dies
// while the survivors agree, or while they connect, makes them start over
// without it, so Shrink returns the same communicator everywhere or an
// error; a rank that dies after they agreed is a failure of the new
// communicator, reported by its operations as usual. A rank that is alive
// but never calls Shrink (stopped, or still computing) is waited for until
// ctx ends; the error then names it. Shrink needs a rendezvous that counts
// (bootstrap.Adder: rdmarun's and the in-memory one do, PMI does not), and
// one that outlives the failed rank: under rdmarun, --keep-going keeps the
// job running when a rank dies.
func (c *Comm) Shrink(ctx context.Context) (*Comm, error) {
	const op = "Shrink"
	if err := c.check(op); err != nil {
		return nil, err
	}
	if ctx == nil {
		return nil, c.opErr(op, NoPeer, NoTag, fmt.Errorf("%w: nil context", ErrInvalidArgument))
	}
	w := c.w
	ad, ok := w.store.(bootstrap.Adder)
	if !ok {
		return nil, c.opErr(op, NoPeer, NoTag, fmt.Errorf("%w: Shrink needs a rendezvous that counts (bootstrap.Adder), which %T is not", ErrUnsupported, w.store))
	}
	a := &agreement{c: c, ad: ad}
	seq := c.shrinks.Add(1)
	var prev []int
	for attempt := 0; ; attempt++ {
		name := shrinkName(w.name, c.id, seq, attempt)
		nc, members, err := a.attempt(ctx, name, prev)
		if err != nil {
			return nil, c.opErr(op, NoPeer, NoTag, err)
		}
		if nc != nil {
			return nc, nil
		}
		prev = members
		w.log.Info("comm: a rank left during Shrink; starting over without it", "attempt", attempt+1)
	}
}

// Agree returns, on every rank of c that is still in the job, the same
// answer: whether every one of them passed flag true, and which ranks of c
// (in c's numbering, ascending) left the job without voting. It works on a
// failed communicator (it does not use c's connections), as ULFM's
// MPI_Comm_agree does, so survivors can agree whether to go on, or which
// ranks failed, before or instead of a Shrink. A rank that votes and then
// dies still counts. Like Shrink, it is a collective over the survivors
// that waits for a live rank until ctx ends (the error names the rank),
// and needs a rendezvous that counts.
func (c *Comm) Agree(ctx context.Context, flag bool) (all bool, failed []int, err error) {
	const op = "Agree"
	if err := c.check(op); err != nil {
		return false, nil, err
	}
	if ctx == nil {
		return false, nil, c.opErr(op, NoPeer, NoTag, fmt.Errorf("%w: nil context", ErrInvalidArgument))
	}
	w := c.w
	ad, ok := w.store.(bootstrap.Adder)
	if !ok {
		return false, nil, c.opErr(op, NoPeer, NoTag, fmt.Errorf("%w: Agree needs a rendezvous that counts (bootstrap.Adder), which %T is not", ErrUnsupported, w.store))
	}
	a := &agreement{c: c, ad: ad}
	n := c.agrees.Add(1)
	key := func(sr int) string { return fmt.Sprintf("comm/agree/%s.a%d.%d/%d", w.name, c.id, n, sr) }
	mine := int64(voteNo)
	if flag {
		mine = voteYes
	}
	me := w.storeRank(w.ep.Rank())
	if err := a.announce(ctx, key(me), mine); err != nil {
		return false, nil, c.opErr(op, NoPeer, NoTag, err)
	}
	all = flag
	for r, wr := range c.members {
		sr := w.storeRank(wr)
		if sr == me {
			continue
		}
		v, err := a.await(ctx, key(sr), sr)
		if err != nil {
			return false, nil, c.opErr(op, r, NoTag, fmt.Errorf("waiting for its vote (job rank %d): %w", sr, err))
		}
		switch v {
		case voteAbsent:
			failed = append(failed, r)
		case voteNo:
			all = false
		}
	}
	return all, failed, nil
}

// agreement runs Shrink's rounds through the rendezvous. Each rank
// announces a small value under a key, first in a counter (which cannot be
// lost once added) and then as a key others can wait for; a rank that waits
// for another's key also waits for that rank's LeftKey, and when the
// departure comes first the counter says for certain what, if anything, the
// departed rank announced: the store applies its requests in order.
type agreement struct {
	c  *Comm
	ad bootstrap.Adder
}

const (
	voteAbsent = 0 // the rank left without announcing
	voteYes    = 1
	voteNo     = 2
)

func (a *agreement) announce(ctx context.Context, key string, v int64) error {
	if _, err := a.ad.Add(ctx, "n/"+key, v); err != nil {
		return err
	}
	return a.c.w.store.Put(ctx, key, []byte{byte(v)})
}

// await returns what job rank sr announced under key, or voteAbsent if it
// left the job without announcing.
func (a *agreement) await(ctx context.Context, key string, sr int) (int64, error) {
	gctx, cancel := context.WithCancel(ctx)
	type res struct {
		v    []byte
		err  error
		left bool
	}
	ch := make(chan res, 2)
	get := func(k string, left bool) {
		v, err := a.c.w.store.Get(gctx, k)
		ch <- res{v, err, left}
	}
	go get(key, false)
	go get(bootstrap.LeftKey(sr), true)
	r := <-ch
	cancel()
	<-ch
	switch {
	case r.err != nil:
		return 0, r.err
	case !r.left && len(r.v) == 1:
		return int64(r.v[0]), nil
	case !r.left:
		return 0, fmt.Errorf("%w: malformed Shrink vote %q of job rank %d", ErrMismatch, r.v, sr)
	}
	return a.ad.Add(ctx, "n/"+key, 0)
}

// attempt is one round of Shrink with keys under name: who is in, an
// endpoint among them, and whether every one of them has it. A nil
// communicator and no error mean: start over, without members (which
// are the job ranks that were in, for the next attempt to compare with).
func (a *agreement) attempt(ctx context.Context, name string, prev []int) (nc *Comm, members []int, err error) {
	c, w := a.c, a.c.w
	me := w.storeRank(w.ep.Rank())
	vote := func(k string, r int) string { return "comm/shrink/" + name + "/" + k + "/" + strconv.Itoa(r) }

	// Who is in: every rank of c that announces before it leaves.
	if err := a.announce(ctx, vote("in", me), voteYes); err != nil {
		return nil, nil, err
	}
	if h := shrinkHook; h != nil {
		if err := h(c, "in"); err != nil {
			return nil, nil, err
		}
	}
	newRank := -1
	for r, wr := range c.members {
		sr := w.storeRank(wr)
		if sr == me {
			newRank = len(members)
			members = append(members, sr)
			continue
		}
		v, err := a.await(ctx, vote("in", sr), sr)
		if err != nil {
			return nil, nil, fmt.Errorf("waiting for rank %d (job rank %d) to join the shrink: %w", r, sr, err)
		}
		if v == voteYes {
			members = append(members, sr)
		}
	}

	// An endpoint among them, given up when one of them leaves.
	actx, cancel := context.WithCancelCause(ctx)
	stopWatch := a.watchLeft(actx, cancel, members, me)
	po := w.p2pOpts
	po.Name = name
	sub := &subStore{s: w.store, prefix: "comm/shrink/" + name + "/kv/", rank: newRank, members: members}
	ep, setupErr := p2p.New(actx, sub, po)
	if setupErr != nil {
		if cause := context.Cause(actx); cause != nil && !errors.Is(cause, ctx.Err()) {
			setupErr = fmt.Errorf("%w (%w)", cause, setupErr)
		}
	}
	cancel(nil)
	stopWatch()
	fail := func(err error) (*Comm, []int, error) {
		if ep != nil {
			ep.Close()
		}
		return nil, nil, err
	}

	// Does every member have it?
	mine := int64(voteYes)
	if setupErr != nil {
		mine = voteNo
	}
	if err := a.announce(ctx, vote("ok", me), mine); err != nil {
		return fail(err)
	}
	var lacking []int
	for i, sr := range members {
		v := mine
		if sr != me {
			var err error
			if v, err = a.await(ctx, vote("ok", sr), sr); err != nil {
				return fail(fmt.Errorf("waiting for job rank %d to connect to the survivors: %w", sr, err))
			}
		}
		if v != voteYes {
			lacking = append(lacking, i)
		}
	}
	if len(lacking) > 0 {
		if ep != nil {
			ep.Close()
		}
		if slices.Equal(members, prev) {
			// Nobody left since the last attempt: trying again would fail
			// the same way.
			if setupErr != nil {
				return nil, nil, fmt.Errorf("connecting the %d survivors: %w", len(members), setupErr)
			}
			return nil, nil, fmt.Errorf("connecting the %d survivors: new ranks %v (job ranks %v) failed to connect", len(members), lacking, pick(members, lacking))
		}
		return nil, members, nil
	}

	// Every member has it: the new world, on the copies Init measured.
	ep.SetSingleCopyMin(w.singleCopy)
	w2 := &world{
		ep: ep, store: w.store, name: name, log: w.log, exit: w.exit, collOpts: w.collOpts,
		p2pOpts: w.p2pOpts, storeRanks: members, localRank: -1, net: w.net, singleCopy: w.singleCopy,
		stop: make(chan struct{}), comms: map[*Comm]struct{}{},
	}
	for _, sr := range members {
		wr := w.worldRankOf(sr)
		w2.hostIdx = append(w2.hostIdx, w.hostIdx[wr])
		w2.hostNames = append(w2.hostNames, w.hostNames[wr])
	}
	ids := make([]int, len(members))
	for i := range ids {
		ids[i] = i
	}
	if nc, err = w2.newComm(0, ids, true); err != nil {
		return fail(err)
	}
	w2.ownStore = w.shareStore()
	w2.watchAbort()
	w2.startLazyWorker()
	w.log.Debug("comm: shrunk", "rank", nc.rank, "size", nc.size, "from", c.size)
	return nc, members, nil
}

// shrinkName names an attempt's keys and endpoint, unique in the job: a
// hash of where it comes from, so that the names of worlds shrunk from
// shrunk worlds do not grow past the store's key length.
func shrinkName(parent string, id, seq uint32, attempt int) string {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s\x00%d\x00%d\x00%d", parent, id, seq, attempt)
	return fmt.Sprintf("s%016x", h.Sum64())
}

func pick(s, idx []int) []int {
	out := make([]int, len(idx))
	for i, j := range idx {
		out[i] = s[j]
	}
	return out
}

// watchLeft cancels ctx, naming the rank, when one of members (job ranks)
// other than me leaves the job; the returned func stops watching.
func (a *agreement) watchLeft(ctx context.Context, cancel context.CancelCauseFunc, members []int, me int) func() {
	var wg sync.WaitGroup
	for i, sr := range members {
		if sr == me {
			continue
		}
		wg.Go(func() {
			if v, err := a.c.w.store.Get(ctx, bootstrap.LeftKey(sr)); err == nil {
				cancel(fmt.Errorf("%w: new rank %d (job rank %d) left while the survivors connected: %s", ErrPeerLost, i, sr, v))
			}
		})
	}
	return wg.Wait
}

// subStore is the rendezvous as the endpoint of a shrunk communicator sees
// it: its members only, renumbered, under their own keys. The store's own
// Fence counts every rank of the job, the dead ones too, so Fence here is
// made of keys.
type subStore struct {
	s       bootstrap.Store
	prefix  string
	rank    int
	members []int
	fences  atomic.Int64
}

func (s *subStore) Rank() int { return s.rank }
func (s *subStore) Size() int { return len(s.members) }
func (s *subStore) Put(ctx context.Context, key string, v []byte) error {
	return s.s.Put(ctx, s.prefix+key, v)
}
func (s *subStore) Get(ctx context.Context, key string) ([]byte, error) {
	return s.s.Get(ctx, s.prefix+key)
}
func (s *subStore) Fence(ctx context.Context) error {
	n := s.fences.Add(1)
	k := func(r int) string { return fmt.Sprintf("fence/%d/%d", n, r) }
	if err := s.Put(ctx, k(s.rank), nil); err != nil {
		return err
	}
	for r := range s.members {
		if r != s.rank {
			if _, err := s.Get(ctx, k(r)); err != nil {
				return err
			}
		}
	}
	return nil
}

// storeRank is the rendezvous's rank of the world's rank r.
func (w *world) storeRank(r int) int {
	if w.storeRanks == nil || r < 0 || r >= len(w.storeRanks) {
		return r
	}
	return w.storeRanks[r]
}

// worldRankOf is the world's rank of the rendezvous's rank sr (-1 when it
// is not in this world).
func (w *world) worldRankOf(sr int) int {
	if w.storeRanks == nil {
		return sr
	}
	return slices.Index(w.storeRanks, sr)
}

// epRank is the endpoint's rank for the rendezvous's rank sr, this rank's
// own when sr is not a member (for a revoke).
func (w *world) epRank(sr int) int {
	if r := w.worldRankOf(sr); r >= 0 {
		return r
	}
	return w.ep.Rank()
}

// shareStore hands the rendezvous this world closes at Close to a world
// made by Shrink as well: the last of them to close closes it.
func (w *world) shareStore() io.Closer {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ownStore == nil {
		return nil
	}
	sc, ok := w.ownStore.(*sharedCloser)
	if !ok {
		sc = &sharedCloser{c: w.ownStore}
		sc.n.Store(1)
		w.ownStore = sc
	}
	sc.n.Add(1)
	return sc
}

// sharedCloser closes c at its last Close.
type sharedCloser struct {
	c io.Closer
	n atomic.Int32
}

func (s *sharedCloser) Close() error {
	if s.n.Add(-1) == 0 {
		return s.c.Close()
	}
	return nil
}

// shrinkHook, when set (by tests), runs at points of Shrink; an error
// ends that rank's Shrink as if it had died there.
var shrinkHook func(c *Comm, point string) error
