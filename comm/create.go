package comm

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/rdmago/rdmago/bootstrap"
	"github.com/rdmago/rdmago/p2p"
)

// ctlContext is the endpoint matching context of comm's own control
// messages between ranks that do not share a communicator yet
// (CreateGroup). It is the highest odd id below p2p's reserved range;
// newComm never hands out the pair it belongs to.
const ctlContext = p2p.FirstReservedContext - 1

// CreateGroup makes a communicator of the ranks of c listed in ranks
// (MPI_Comm_create_group): rank i of the new communicator is rank
// ranks[i] of c. Only the listed ranks call it, each with the same list;
// the others go on with their work, so it is not a collective over c and
// takes no turn in c's collective order.
//
// A list that is empty, names a rank outside [0, Size()) or one twice, or
// does not name the calling rank fails at once with an error naming the
// entry. Lists that differ between the listed ranks fail with ErrMismatch
// naming a rank and both lists, on every rank that compared them. (The
// lowest listed rank compares them: a rank whose list does not start from
// the same lowest rank cannot be told and waits until ctx ends.)
//
// CreateGroup calls on one parent whose lists share ranks must be made in
// the same order on those ranks, as collectives are.
func (c *Comm) CreateGroup(ctx context.Context, ranks []int) (*Comm, error) {
	const op = "CreateGroup"
	if err := c.check(op); err != nil {
		return nil, err
	}
	if ctx == nil {
		return nil, c.opErr(op, NoPeer, NoTag, fmt.Errorf("%w: nil context", ErrInvalidArgument))
	}
	if len(ranks) == 0 {
		return nil, c.opErr(op, NoPeer, NoTag, fmt.Errorf("%w: empty rank list", ErrInvalidArgument))
	}
	seen := make(map[int]int, len(ranks))
	for i, r := range ranks {
		if r < 0 || r >= c.size {
			return nil, c.opErr(op, r, NoTag, fmt.Errorf("%w: ranks[%d] = %d is not in [0, %d)", ErrInvalidRank, i, r, c.size))
		}
		if j, dup := seen[r]; dup {
			return nil, c.opErr(op, r, NoTag, fmt.Errorf("%w: rank %d is listed twice (ranks[%d] and ranks[%d])", ErrInvalidArgument, r, j, i))
		}
		seen[r] = i
	}
	if _, ok := seen[c.rank]; !ok {
		return nil, c.opErr(op, NoPeer, NoTag, fmt.Errorf("%w: rank %d calls it but is not in the list %v", ErrInvalidArgument, c.rank, ranks))
	}
	ch, err := c.w.ep.Channel(ctlContext)
	if err != nil {
		return nil, c.wrap(op, NoPeer, NoTag, err)
	}
	id, err := c.agreeGroup(ctx, ch, ranks)
	if err != nil {
		return nil, err
	}
	members := make([]int, len(ranks))
	for i, r := range ranks {
		members[i] = c.members[r]
	}
	out, err := c.w.newComm(id, members, false)
	if err != nil {
		return nil, c.wrap(op, NoPeer, NoTag, err)
	}
	return out, nil
}

// agreeGroup checks that the listed ranks passed the same list and gives
// them a fresh context id. The lowest listed rank leads: every other
// member sends it its list (and its next free id, for stores that cannot
// count); it compares them with its own and answers each with the id or
// the mismatch. Between two ranks of one group, messages from the higher
// to the lower are lists and the other way answers, so the parent's
// context id alone serves as the tag.
func (c *Comm) agreeGroup(ctx context.Context, ch *p2p.Channel, ranks []int) (uint32, error) {
	const op = "CreateGroup"
	tag := int(c.id)
	leader := slices.Min(ranks)
	w := c.w
	if c.rank != leader {
		msg := make([]byte, 8*(1+len(ranks)))
		binary.LittleEndian.PutUint64(msg, uint64(max(w.nextCtx.Load(), 1)))
		for i, r := range ranks {
			binary.LittleEndian.PutUint64(msg[8*(i+1):], uint64(r))
		}
		if err := ch.Send(ctx, c.members[leader], tag, msg); err != nil {
			return 0, c.wrap(op, leader, NoTag, err)
		}
		ans, err := recvAll(ctx, ch, c.members[leader], tag)
		if err != nil {
			return 0, c.wrap(op, leader, NoTag, fmt.Errorf("waiting for the lowest listed rank's answer (did every listed rank pass the same list?): %w", err))
		}
		if len(ans) == 9 && ans[0] == 'O' {
			id := uint32(binary.LittleEndian.Uint64(ans[1:]))
			bumpNext(w, id+1)
			return id, nil
		}
		if len(ans) > 0 && ans[0] == 'E' {
			return 0, c.opErr(op, leader, NoTag, fmt.Errorf("%w: %s", ErrMismatch, ans[1:]))
		}
		return 0, c.opErr(op, leader, NoTag, fmt.Errorf("%w: malformed answer of %d bytes", ErrMismatch, len(ans)))
	}

	// The leader: every other member's list, in list order.
	next := uint64(max(w.nextCtx.Load(), 1))
	var mismatch string
	for _, r := range ranks {
		if r == c.rank {
			continue
		}
		msg, err := recvAll(ctx, ch, c.members[r], tag)
		if err != nil {
			return 0, c.wrap(op, r, NoTag, fmt.Errorf("waiting for its list (did every listed rank pass the same list?): %w", err))
		}
		theirs, n, ok := decodeList(msg)
		if !ok {
			theirs = nil
		}
		next = max(next, n)
		if mismatch == "" && !slices.Equal(theirs, ranks) {
			mismatch = fmt.Sprintf("rank %d listed %v, rank %d listed %v", r, theirs, c.rank, ranks)
		}
	}
	var ans []byte
	var id uint32
	var failure error
	switch {
	case mismatch != "":
		failure = fmt.Errorf("%w: %s", ErrMismatch, mismatch)
		ans = append([]byte{'E'}, mismatch...)
	default:
		var err error
		if id, err = c.groupID(ctx, next); err != nil {
			failure = err
			ans = append([]byte{'E'}, fmt.Sprintf("allocating a context id on rank %d: %v", c.rank, err)...)
		} else {
			ans = binary.LittleEndian.AppendUint64([]byte{'O'}, uint64(id))
		}
	}
	for _, r := range ranks {
		if r == c.rank {
			continue
		}
		if err := ch.Send(ctx, c.members[r], tag, ans); err != nil && failure == nil {
			failure = c.wrap(op, r, NoTag, err)
		}
	}
	if failure != nil {
		return 0, c.wrap(op, NoPeer, NoTag, failure)
	}
	return id, nil
}

// groupID is a fresh context id for a group: from the rendezvous's counter
// when it has one (unique in the job), else next, the highest of the
// members' next free ids (see allocIDs).
func (c *Comm) groupID(ctx context.Context, next uint64) (uint32, error) {
	if ad, ok := c.w.store.(bootstrap.Adder); ok {
		v, err := ad.Add(ctx, ctxKey+"/"+c.w.name, 1)
		if err != nil {
			return 0, err
		}
		return uint32(v), nil
	}
	bumpNext(c.w, uint32(next)+1)
	return uint32(next), nil
}

// bumpNext raises the world's next free context id to at least n.
func bumpNext(w *world, n uint32) {
	for {
		cur := w.nextCtx.Load()
		if cur >= n || w.nextCtx.CompareAndSwap(cur, n) {
			return
		}
	}
}

func decodeList(msg []byte) (ranks []int, next uint64, ok bool) {
	if len(msg) < 8 || len(msg)%8 != 0 {
		return nil, 0, false
	}
	next = binary.LittleEndian.Uint64(msg)
	for off := 8; off < len(msg); off += 8 {
		ranks = append(ranks, int(int64(binary.LittleEndian.Uint64(msg[off:]))))
	}
	return ranks, next, true
}

// recvAll receives the next message from src with tag, whatever its size.
func recvAll(ctx context.Context, ch *p2p.Channel, src, tag int) ([]byte, error) {
	m, err := ch.Mprobe(ctx, src, tag)
	if err != nil {
		return nil, err
	}
	buf := make([]byte, m.Status().Count)
	if _, err := m.Recv(ctx, buf); err != nil {
		return nil, err
	}
	return buf, nil
}
