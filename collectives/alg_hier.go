package collectives

import (
	"slices"
	"sort"

	"github.com/rdmago/rdmago/internal/ntcopy"
)

// allreduceHier is the two-level allreduce for jobs spanning hosts: reduce
// inside each host to its leader (the lowest rank there) over the fast
// local links, allreduce among the leaders over the network, broadcast
// inside each host. Only leaders touch the slow links, once each way, so a
// mixed job no longer runs at the speed of its slowest link on every step.
// Needs a commutative op (the intra-host reduction regroups ranks).
func (c *call) allreduceHier(buf []byte) error {
	local, leaders := c.hostGroups()
	big := c.e.hierBig(len(buf))
	lc := c.sub(local, 0)
	if lc.n > 1 {
		if err := lc.reduceToRoot(buf, 0, big); err != nil {
			return err
		}
	}
	if lc.me == 0 && len(leaders) > 1 {
		lead := c.sub(leaders, 0)
		best, _ := c.e.model.cheapest(CollAllreduce, leadersAllreduce, lead.n, float64(len(buf)))
		var err error
		switch best {
		case Ring:
			err = lead.allreduceRing(buf)
		case Rabenseifner:
			err = lead.allreduceRabenseifner(nil, buf)
		default:
			err = lead.allreduceRD(nil, buf)
		}
		if err != nil {
			return err
		}
	}
	if lc.n > 1 {
		if big {
			return lc.bcastScatterAllgather(buf, 0)
		}
		return lc.bcastBinomial(buf, 0)
	}
	return nil
}

// bcastHier is the two-level broadcast: the root sends to one
// representative per host (itself on its own host, the lowest rank
// elsewhere) over the network, then each representative broadcasts inside
// its host. The slow links carry the message once per host.
func (c *call) bcastHier(buf []byte, root int) error {
	local, _ := c.hostGroups()
	reps, myRep := c.representatives(root)
	big := c.e.hierBig(len(buf))
	bcast := func(v *call, root int) error {
		if big && v.n > 2 {
			return v.bcastScatterAllgather(buf, root)
		}
		return v.bcastBinomial(buf, root)
	}
	// Between two hosts the root waits for its send to the other host after
	// its host's stage, not before: a large one goes by rendezvous, whose
	// send lasts until the receiver has read it over the network, and the
	// host's ranks would wait that long for data they could have had at
	// once (a 1 MiB bcast of 2 hosts of 2 ranks on 10 Gbit/s links: the
	// root's host-mate took 0.65 ms where the root took 0.71; after, 0.07).
	// Not between more hosts, where the host's stage then competes with
	// the sends down the representatives' tree for the root's CPU: 4 hosts
	// of 2 ranks on this machine's 2 CPUs took 1.18 and 1.30 of the time at
	// 512 KiB and 1 MiB that way.
	var net outRange
	if c.me == myRep && len(reps) > 1 {
		r := sort.SearchInts(reps, root)
		v := c.sub(reps, r)
		var err error
		if v.n == 2 {
			net, err = v.bcastBinomialSends(buf, r)
		} else {
			err = bcast(v, r)
		}
		if err != nil {
			return err
		}
	}
	if len(local) > 1 {
		r := sort.SearchInts(local, myRep)
		if err := bcast(c.sub(local, r), r); err != nil {
			return err
		}
	}
	return c.waitOuts(net)
}

// reduceHier is the two-level reduce, bcastHier backwards: the ranks of
// each host reduce to its representative over the local links, then the
// representatives reduce to the root over the network, by whichever of
// the binomial tree and Rabenseifner's form the model finds cheaper for
// that many hosts. Only the representatives cross the network, and the
// partial of a host crosses it once on the way to the root; a flat form
// runs every step's exchanges between hosts at once on links the ranks of
// a host share, and where they share a CPU too, every step waits for the
// scheduler to run them all. work holds this rank's vector and is
// overwritten (the root's with the result). Needs a commutative op.
func (c *call) reduceHier(work []byte, root int) error {
	local, _ := c.hostGroups()
	reps, myRep := c.representatives(root)
	if len(local) > 1 {
		r := sort.SearchInts(local, myRep)
		if err := c.sub(local, r).reduceToRoot(work, r, c.e.hierBig(len(work))); err != nil {
			return err
		}
	}
	if c.me != myRep || len(reps) < 2 {
		return nil
	}
	r := sort.SearchInts(reps, root)
	lead := c.sub(reps, r)
	a, _ := c.e.model.cheapest(CollReduce, leadersReduce, lead.n, float64(len(work)))
	return lead.reduceToRoot(work, r, a == Rabenseifner)
}

// representatives returns one rank per host, sorted: root on its host, the
// lowest rank on every other; and the one of this rank's host. The slice
// is the call's scratch (c.ints), valid until the next representatives.
func (c *call) representatives(root int) (reps []int, mine int) {
	hosts := c.e.hosts
	local, leaders := c.hostGroups()
	reps = append(c.ints[:0], leaders...)
	for i, r := range reps {
		if hosts[r] == hosts[root] {
			reps[i] = root
		}
	}
	slices.Sort(reps)
	c.ints = reps[:0]
	mine = local[0]
	if hosts[c.me] == hosts[root] {
		mine = root
	}
	return reps, mine
}

// hostLayout is the group's ranks by host, worked out once (New) for the
// hierarchical algorithms: every call used to build it in maps and slices
// of its own. Its slices are shared: nobody may modify them.
type hostLayout struct {
	leaders []int   // the lowest rank of every host, sorted
	ranksOf [][]int // per rank, the ranks of its host, sorted
}

func newHostLayout(hosts []int) hostLayout {
	var l hostLayout
	byHost := map[int][]int{}
	for r, h := range hosts {
		if len(byHost[h]) == 0 {
			l.leaders = append(l.leaders, r)
		}
		byHost[h] = append(byHost[h], r)
	}
	l.ranksOf = make([][]int, len(hosts))
	for r, h := range hosts {
		l.ranksOf[r] = byHost[h]
	}
	return l
}

// hostGroups returns the world ranks on this rank's host and the leaders
// (the lowest rank of every host), both sorted; the caller must not
// modify them. Hierarchical algorithms run on the whole group (c.me is
// this rank's group rank).
func (c *call) hostGroups() (local, leaders []int) {
	return c.e.hl.ranksOf[c.e.rank], c.e.hl.leaders
}

// hostRanks returns, per rank, the ranks of its host in rank order (not
// to be modified).
func (c *call) hostRanks() [][]int { return c.e.hl.ranksOf }

// swapAll has this view rank send sendBuf(v) to every other view rank v
// and receive recvBuf(v) from it, all posted at once (receives first);
// it returns the filled receive buffers by view rank, nil for itself.
func (c *call) swapAll(recvBuf, sendBuf func(v int) []byte) ([][]byte, error) {
	in := c.bufList(c.n)
	err := c.postAll(func() error {
		for s := 1; s < c.n; s++ {
			v := mod(c.me-s, c.n)
			in[v] = recvBuf(v)
			if _, err := c.recv(v, in[v], c.h.count); err != nil {
				return err
			}
		}
		for s := 1; s < c.n; s++ {
			v := mod(c.me+s, c.n)
			if _, err := c.send(v, sendBuf(v), c.h.count); err != nil {
				return err
			}
		}
		return nil
	})
	return in, err
}

// barrierHier is the two-level barrier: every rank of a host reports to
// its leader over the fast local links, the leaders run the dissemination
// barrier among themselves over the network, and each leader releases its
// host. Only leaders touch the slow links: at 2 hosts of 2 ranks one
// exchange crosses the network instead of six messages, each of which
// wakes a sleeping rank on the other host.
func (c *call) barrierHier() error {
	local, leaders := c.hostGroups()
	lc := c.sub(local, 0)
	if lc.me != 0 {
		// Arrive, then wait for the release (the receive goes first).
		return lc.sendrecv(0, nil, lc.h.count, 0, nil, lc.h.count)
	}
	if err := lc.fanIn(); err != nil {
		return err
	}
	if len(leaders) > 1 {
		lead := c.sub(leaders, 0)
		if err := lead.barrierDissemination(); err != nil {
			return err
		}
	}
	return lc.fanOut()
}

// fanIn has view rank 0 receive an empty message from every other rank,
// all posted at once.
func (c *call) fanIn() error {
	return c.postAll(func() error {
		for v := 1; v < c.n; v++ {
			if _, err := c.recv(v, nil, c.h.count); err != nil {
				return err
			}
		}
		return nil
	})
}

// fanOut has view rank 0 send an empty message to every other rank, all
// posted at once.
func (c *call) fanOut() error {
	return c.postAll(func() error {
		for v := 1; v < c.n; v++ {
			if _, err := c.send(v, nil, c.h.count); err != nil {
				return err
			}
		}
		return nil
	})
}

// allgatherHier is the two-level allgather: every rank sends its block to
// its host's leader, the leaders send their hosts' blocks to each other
// in one message per pair (all posted at once), and each leader
// broadcasts the result inside its host. The network carries one message
// per pair of hosts instead of one per pair of ranks on different hosts.
// Blocks sit at their ranks' places in buf; a host's ranks need not be
// contiguous (their blocks are packed for the leaders' exchange).
func (c *call) allgatherHier(buf []byte) error {
	local, leaders := c.hostGroups()
	lc := c.sub(local, 0)
	if lc.me != 0 {
		s, err := lc.send(0, c.rblock(buf, c.me), c.h.count)
		if err != nil {
			return err
		}
		if err := s.wait(); err != nil {
			return err
		}
		return lc.bcastBinomial(buf, 0)
	}
	if err := lc.postAll(func() error {
		for v := 1; v < lc.n; v++ {
			if _, err := lc.recv(v, c.rblock(buf, local[v]), c.h.count); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return err
	}
	if len(leaders) > 1 {
		if err := c.leadersExchange(buf, leaders); err != nil {
			return err
		}
	}
	return lc.bcastBinomial(buf, 0)
}

// leadersExchange is allgatherHier's step among the leaders (this rank is
// one): each sends its host's blocks, packed in rank order, to every other
// leader and unpacks theirs.
func (c *call) leadersExchange(buf []byte, leaders []int) error {
	ranksOf := c.hostRanks()
	bs := int(c.h.count) * c.esize
	pack := func(ranks []int) []byte {
		b := c.get(len(ranks) * bs)
		for i, r := range ranks {
			ntcopy.Bulk(b[i*bs:(i+1)*bs], c.rblock(buf, r))
		}
		return b
	}
	lead := c.sub(leaders, 0)
	mine := ranksOf[c.me]
	out := pack(mine)
	in, err := lead.swapAll(
		func(v int) []byte { return c.get(len(ranksOf[leaders[v]]) * bs) },
		func(int) []byte { return out })
	if err != nil {
		return err
	}
	for v, b := range in {
		if b == nil {
			continue
		}
		for i, r := range ranksOf[leaders[v]] {
			ntcopy.Bulk(c.rblock(buf, r), b[i*bs:(i+1)*bs])
		}
	}
	return nil
}

// alltoallHier is the two-level alltoall: every rank sends its whole send
// buffer to its host's leader; the leaders send each other, in one message
// per pair of hosts, the blocks their hosts' ranks have for the other
// host's ranks; each leader then hands every rank of its host its whole
// result in one message. The network carries one message per pair of
// hosts instead of one per pair of ranks on different hosts, at the price
// of the blocks passing through the leaders.
//
// A rank's own block goes to the leader and back with the rest: leaving it
// out splits the buffer around it into two messages each way, and on a
// crowded host the extra messages cost more than the bytes saved (at 2
// hosts of 2 ranks, 8 and 16 KiB blocks ran a third slower).
//
// Every message announces the call's count (a rank's block), as the flat
// forms' do, so that a rank whose count differs is named as such; the
// payload's length is checked too.
func (c *call) alltoallHier(send, recv []byte) error {
	local, leaders := c.hostGroups()
	lc := c.sub(local, 0)
	if lc.me != 0 {
		return lc.sendrecv(0, send, c.h.count, 0, recv, c.h.count)
	}
	// from[i] is the send buffer of local[i].
	from := c.bufList(lc.n)
	from[0] = send
	if err := lc.postAll(func() error {
		for v := 1; v < lc.n; v++ {
			from[v] = c.get(len(send))
			if _, err := lc.recv(v, from[v], c.h.count); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return err
	}
	// to[i] is the result of local[i].
	to := c.bufList(lc.n)
	to[0] = recv
	for v := 1; v < lc.n; v++ {
		to[v] = c.get(len(recv))
	}
	for i := range local {
		for j, r := range local {
			ntcopy.Bulk(c.rblock(to[j], local[i]), c.rblock(from[i], r))
		}
	}
	if len(leaders) > 1 {
		ranksOf := c.hostRanks()
		bs := int(c.h.count) * c.esize
		lead := c.sub(leaders, 0)
		in, err := lead.swapAll(
			func(v int) []byte { return c.get(len(ranksOf[leaders[v]]) * lc.n * bs) },
			func(v int) []byte {
				dst := ranksOf[leaders[v]]
				// By source (this host's ranks), then destination.
				b := c.get(lc.n * len(dst) * bs)
				for i := range local {
					for j, d := range dst {
						ntcopy.Bulk(b[(i*len(dst)+j)*bs:], c.rblock(from[i], d))
					}
				}
				return b
			})
		if err != nil {
			return err
		}
		for v, b := range in {
			if b == nil {
				continue
			}
			for i, src := range ranksOf[leaders[v]] {
				for j := range local {
					ntcopy.Bulk(c.rblock(to[j], src), b[(i*lc.n+j)*bs:(i*lc.n+j+1)*bs])
				}
			}
		}
	}
	return lc.postAll(func() error {
		for v := 1; v < lc.n; v++ {
			if _, err := lc.send(v, to[v], c.h.count); err != nil {
				return err
			}
		}
		return nil
	})
}

// reduceScatterHier is the two-level reduce-scatter: the ranks of a host
// reduce the whole vector to their leader (binomial tree), the leaders send
// each other, in one message per pair of hosts, the partial blocks of the
// other host's ranks and fold what they get, and each leader hands every
// rank of its host its block. work holds this rank's vector (p blocks of
// the call's count, block r for rank r) and is overwritten; the result goes
// to out. Needs a commutative op (ranks are regrouped by host).
func (c *call) reduceScatterHier(work, out []byte) error {
	local, leaders := c.hostGroups()
	lc := c.sub(local, 0)
	p, es, cnt := c.n, c.esize, c.vec
	blk := func(b []byte, r int) []byte { return block(b, es, cnt, p, r) }
	if lc.n > 1 {
		if err := lc.reduceBinomial(work, 0); err != nil {
			return err
		}
	}
	if lc.me != 0 {
		return lc.recvWait(0, out)
	}
	if len(leaders) > 1 {
		ranksOf := c.hostRanks()
		bs := int(c.h.count) * es
		lead := c.sub(leaders, 0)
		in, err := lead.swapAll(
			func(int) []byte { return c.get(len(local) * bs) },
			func(v int) []byte {
				dst := ranksOf[leaders[v]]
				b := c.get(len(dst) * bs)
				for i, r := range dst {
					ntcopy.Bulk(b[i*bs:(i+1)*bs], blk(work, r))
				}
				return b
			})
		if err != nil {
			return err
		}
		for _, b := range in {
			if b == nil {
				continue
			}
			for i, r := range local {
				c.kern.Combine(blk(work, r), b[i*bs:(i+1)*bs])
			}
		}
	}
	ntcopy.Bulk(out, blk(work, c.me))
	return lc.postAll(func() error {
		for v := 1; v < lc.n; v++ {
			if _, err := lc.send(v, blk(work, local[v]), c.h.count); err != nil {
				return err
			}
		}
		return nil
	})
}
