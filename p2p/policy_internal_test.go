package p2p

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/internal/shmsync"
	"github.com/rdmago/rdmago/verbs"
	_ "github.com/rdmago/rdmago/verbs/ibv" // the automatic choice asks every registered provider
	_ "github.com/rdmago/rdmago/verbs/loop"
)

// devOf is a device of the named registered provider, as the policy sees it.
func devOf(t *testing.T, name string) *device {
	p, err := verbs.Lookup(name)
	require.NoError(t, err)
	return &device{provider: name, traits: p.Traits()}
}

// The defaults the providers' traits give are the ones measured for them
// (see Options.Spin).
func TestWaitPolicy(t *testing.T) {
	shm := []*device{devOf(t, "shm")}
	tcp := []*device{devOf(t, "tcp")}
	ibv := []*device{devOf(t, "ibv")}
	for _, c := range []struct {
		name        string
		o           Options
		devs        []*device
		local, cpus int
		spin, yield time.Duration
	}{
		{"shm, a core per rank", Options{}, shm, 2, 2, 100 * time.Microsecond, 0},
		{"shm, oversubscribed", Options{}, shm, 8, 2, 2 * time.Microsecond, crowdedYield},
		{"shm, explicit", Options{Spin: 7 * time.Microsecond, Yield: time.Microsecond}, shm, 8, 2, 7 * time.Microsecond, time.Microsecond},
		{"shm, none", Options{Spin: -1, Yield: -1}, shm, 2, 2, 0, 0},
		{"tcp", Options{}, tcp, 1, 2, 0, 0},
		{"loop", Options{}, []*device{devOf(t, "loop")}, 1, 2, 0, 0},
		{"shm and tcp", Options{}, append(shm, tcp...), 2, 2, 0, 0},
		{"ibv", Options{}, ibv, 1, 2, 20 * time.Microsecond, 200 * time.Microsecond},
		{"ibv, oversubscribed", Options{}, ibv, 8, 2, 20 * time.Microsecond, crowdedYield},
		{"shm and ibv", Options{}, append(shm, ibv...), 2, 2, 20 * time.Microsecond, 200 * time.Microsecond},
		{"ibv and tcp", Options{}, append(ibv, tcp...), 2, 2, 0, 0},
		{"none", Options{}, nil, 1, 2, 0, 0},
	} {
		p := waitPolicy(c.o, c.devs, c.local, c.cpus)
		assert.Equal(t, c.spin, p.Spin, c.name)
		assert.Equal(t, c.yield, p.Yield, c.name)
		// Goroutines of this process may make the completions: the
		// yields are Gosched, within the spin too.
		assert.True(t, p.Gosched, c.name)
		if c.local <= c.cpus || c.o.Spin != 0 || c.o.Yield != 0 {
			assert.Positive(t, p.YieldInSpin, c.name)
		} else {
			// Crowded, it yields to other processes too, after every
			// poll past the spin (TestWaitPolicyCrowded).
			assert.True(t, p.OSYield, c.name)
		}
		// A waiter keeps a CPU that others want (shmsync.Policy.Contended)
		// only where every rank has one: elsewhere the peer may need it.
		if c.local <= c.cpus {
			assert.Equal(t, contendedPoll, p.Contended, c.name)
		} else {
			assert.Zero(t, p.Contended, c.name)
		}
	}
}

// The per-provider protocol defaults (Options.EagerLimit, PipelineLimit,
// EagerSlotsMax, inline frames, READ chunks) as measured for each.
func TestProviderDefaults(t *testing.T) {
	ep := &Endpoint{opts: Options{EagerSlots: 32}}
	for _, c := range []struct {
		name                   string
		eager, pipe, slots     int
		inline                 bool
		chunkOf1GiB, readChunk int
	}{
		{"shm", 32 << 10, 64 << 10, 128, true, 1 << 30, 1 << 30},
		{"tcp", 256 << 10, 256 << 10, 32, true, 1 << 30, 1 << 30}, // one READ: its waiter streams the response
		{"ibv", 8 << 10, 0, 32, false, 1 << 30, 1 << 30},
		{"loop", 32 << 10, 0, 32, false, 1 << 30, 1 << 30},
	} {
		d := devOf(t, c.name)
		d.caps.MaxMsgSize = 1 << 40
		assert.Equal(t, c.eager, eagerDefault(d.traits), "%s eager", c.name)
		assert.Equal(t, c.pipe, pipelineDefault(d.traits), "%s pipeline", c.name)
		assert.Equal(t, c.slots, ep.eagerSlotsMax(d.traits), "%s slots", c.name)
		assert.Equal(t, c.inline, d.traits.InlineSends, "%s inline", c.name)
		assert.Equal(t, c.readChunk, readChunk(d), "%s READ chunk", c.name)
	}
	// Where ranks outnumber the CPUs, tcp's waiters take only whole frames
	// that fit their read buffer: a rendezvous there is read in pieces.
	d := devOf(t, "tcp")
	d.caps.MaxMsgSize = 1 << 40
	d.crowded = true
	assert.Equal(t, 128<<10, readChunk(d), "tcp READ chunk, crowded")
	assert.Equal(t, 256<<10, pipelineFor(d), "tcp pipeline, crowded: its own")
	d.traits.ReadChunkCrowded = 0
	assert.Equal(t, 1<<30, readChunk(d), "no crowded hint: the uncrowded one")
	// Over shm messages up to 64 KiB go as eager fragments, and up to
	// 256 KiB where ranks outnumber the CPUs, rather than by rendezvous.
	d = devOf(t, "shm")
	assert.Equal(t, 64<<10, pipelineFor(d), "shm pipeline")
	d.crowded = true
	assert.Equal(t, 256<<10, pipelineFor(d), "shm pipeline, crowded")
	// Over shm the eager limit halves, down to 16 KiB, as the host's ranks
	// grow: a rank's eager buffers for the others stay within 8 MiB (32
	// KiB ones up to 9 ranks, 16 KiB from 10); other providers keep theirs.
	d = devOf(t, "shm")
	for _, c := range []struct{ local, slots, eager int }{
		{2, 32, 32 << 10}, {9, 32, 32 << 10}, {10, 32, 16 << 10}, {64, 32, 16 << 10},
		{20, 8, 32 << 10}, // fewer buffers a peer leave room for larger ones
	} {
		e := &Endpoint{localRanks: c.local, opts: Options{EagerSlots: c.slots}}
		assert.Equal(t, c.eager, e.eagerFor(d), "shm eager, %d local ranks, %d buffers", c.local, c.slots)
	}
	// Over a network it halves, down to 64 KiB, as the job grows: a rank's
	// eager buffers for all the others stay within 256 MiB (tcp's 256 KiB
	// ones up to 33 ranks with 32 buffers a peer, 128 KiB up to 65); the
	// ranks sharing a host do not count.
	tcp := devOf(t, "tcp")
	for _, c := range []struct{ size, local, slots, eager int }{
		{2, 1, 32, 256 << 10}, {33, 1, 32, 256 << 10}, {34, 1, 32, 128 << 10}, {65, 1, 32, 128 << 10},
		{66, 1, 32, 64 << 10}, {4096, 1, 32, 64 << 10},
		{64, 64, 32, 128 << 10}, // the host's ranks: shm's budget, not this one
		{128, 1, 8, 256 << 10},  // fewer buffers a peer leave room for larger ones
	} {
		e := &Endpoint{size: c.size, localRanks: c.local, opts: Options{EagerSlots: c.slots}}
		assert.Equal(t, c.eager, e.eagerFor(tcp), "tcp eager, %d ranks, %d buffers", c.size, c.slots)
	}
	// A provider with no hints gets the caller's defaults.
	assert.Equal(t, 32<<10, eagerDefault(verbs.Traits{}))
	assert.Equal(t, 0, pipelineDefault(verbs.Traits{}))
	assert.Equal(t, 32, ep.eagerSlotsMax(verbs.Traits{}))
	// Growth stops at 4096 buffers; an explicit maximum wins.
	big := &Endpoint{opts: Options{EagerSlots: 2048}}
	assert.Equal(t, 4096, big.eagerSlotsMax(verbs.Traits{SlotGrowth: 4}))
	set := &Endpoint{opts: Options{EagerSlots: 32, EagerSlotsMax: 40}}
	assert.Equal(t, 40, set.eagerSlotsMax(verbs.Traits{SlotGrowth: 4}))
}

func TestHostInfo(t *testing.T) {
	for _, c := range []hostInfo{
		{PeerInfo: verbs.PeerInfo{Host: "boot-1/netns-2", Process: "p"}, mask: []byte{0x03}},
		{},
		{PeerInfo: verbs.PeerInfo{Host: "h", Devices: []string{"ibv", "other"}}, mask: []byte{0, 0, 0x80}},
	} {
		got := decodeHostInfo(c.encode())
		assert.Equal(t, c.PeerInfo, got.PeerInfo)
		assert.Equal(t, len(c.mask), len(got.mask))
		assert.Equal(t, onesIn(c.mask), onesIn(got.mask))
	}
	// A record with an identity only decodes.
	got := decodeHostInfo([]byte("old"))
	assert.Equal(t, "old", got.Host)
	assert.Nil(t, got.mask)
	// Two ranks bound to one core each share two CPUs; bound to the same
	// core, one.
	assert.Equal(t, 2, onesIn(orMask([]byte{0x01}, []byte{0x02})))
	assert.Equal(t, 1, onesIn(orMask([]byte{0x01}, []byte{0x01})))
	assert.Equal(t, 3, onesIn(orMask([]byte{0x01}, []byte{0x00, 0x03})))
	// This process's own mask covers at least one CPU on Linux.
	if m := cpuMask(); m != nil {
		assert.GreaterOrEqual(t, onesIn(m), 1)
	}
}

// The automatic transport: shm on one host whatever else, ibv across hosts
// only when both ends have it, tcp otherwise; an unknown identity never
// means one host, and loop (used only when named) is never picked, even
// in one process.
func TestPickProvider(t *testing.T) {
	a, b := "boot-a/ns-1", "boot-b/ns-1"
	ib := []string{"ibv"}
	host := func(id string, devs []string) hostInfo {
		return hostInfo{PeerInfo: verbs.PeerInfo{Host: id, Process: "proc-" + id, Devices: devs}}
	}
	for _, c := range []struct {
		me, peer hostInfo
		want     string
	}{
		{host(a, nil), host(a, nil), "shm"},
		{host(a, ib), host(a, ib), "shm"},
		{host(a, ib), host(b, ib), "ibv"},
		{host(a, ib), host(b, nil), "tcp"},
		{host(a, nil), host(b, ib), "tcp"},
		{host("", nil), host("", nil), "tcp"},
		{host("", ib), host("", ib), "ibv"},
		{hostInfo{}, hostInfo{}, "tcp"}, // a lone rank's device
	} {
		got := pickProvider(verbs.Preferred(), c.me, c.peer)
		require.NotNil(t, got)
		assert.Equal(t, c.want, got.Name(), "%+v / %+v", c.me, c.peer)
		got = pickProvider(verbs.Preferred(), c.peer, c.me)
		require.NotNil(t, got)
		assert.Equal(t, c.want, got.Name(), "symmetric: %+v / %+v", c.peer, c.me)
	}
}

// TestWaitPolicyCrowded: a waiter over several devices whose host's ranks
// outnumber the CPUs yields after every poll that finds nothing, to other
// processes (the sender may need this core) and to this one's goroutines,
// for crowdedYield, and never spins; over one device whose waiters poll
// (shm, ibv) it does so after the device's SpinShared, and over one whose
// goroutines make the completions (tcp) it leaves the yields to the CQ's
// Wait; an explicit Spin or Yield keeps the usual policy, and with a CPU
// per rank the mixed defaults stay.
func TestWaitPolicyCrowded(t *testing.T) {
	shm, tcp, ibv := devOf(t, "shm"), devOf(t, "tcp"), devOf(t, "ibv")
	crowded := shmsync.Policy{Yield: crowdedYield, Gosched: true, OSYield: true, CheckEvery: 1}
	usual := func(spin, yield time.Duration, contended bool) shmsync.Policy {
		p := shmsync.Policy{Spin: spin, Yield: yield, Gosched: true, CheckEvery: pollCheckEvery, YieldInSpin: pollYieldInSpin}
		if contended {
			p.Contended = contendedPoll
		}
		return p
	}
	for _, c := range []struct {
		name        string
		o           Options
		devs        []*device
		local, cpus int
		want        shmsync.Policy
	}{
		{"shm and tcp, crowded", Options{}, []*device{shm, tcp}, 4, 2, crowded},
		{"shm and ibv, crowded", Options{}, []*device{shm, ibv}, 3, 2, crowded},
		{"shm and tcp, crowded, explicit spin", Options{Spin: 5 * time.Microsecond}, []*device{shm, tcp}, 4, 2, usual(5*time.Microsecond, 0, false)},
		{"shm and tcp, crowded, explicit yield", Options{Yield: time.Millisecond}, []*device{shm, tcp}, 4, 2, usual(0, time.Millisecond, false)},
		{"shm and ibv, crowded, no spin", Options{Spin: -1}, []*device{shm, ibv}, 4, 2, usual(0, mixedYield, false)},
		{"shm and tcp, a CPU each", Options{}, []*device{shm, tcp}, 2, 2, usual(0, 0, true)},
		{"shm and ibv, a CPU each", Options{}, []*device{shm, ibv}, 2, 2, usual(mixedSpin, mixedYield, true)},
		{"shm alone, crowded", Options{}, []*device{shm}, 4, 2, func() shmsync.Policy {
			p := crowded
			p.Spin = shm.traits.Wait.SpinShared
			return p
		}()},
		{"ibv alone, crowded", Options{}, []*device{ibv}, 3, 2, func() shmsync.Policy {
			p := crowded
			p.Spin = ibv.traits.Wait.SpinShared
			return p
		}()},
		{"shm alone, crowded, explicit yield", Options{Yield: time.Millisecond}, []*device{shm}, 4, 2, usual(shm.traits.Wait.SpinShared, time.Millisecond, false)},
		{"tcp alone, crowded", Options{}, []*device{tcp}, 4, 2, usual(tcp.traits.Wait.SpinShared, tcp.traits.Wait.Yield, false)},
		{"shm alone, a CPU each, explicit contended", Options{Contended: time.Millisecond}, []*device{shm}, 2, 2,
			func() shmsync.Policy {
				p := usual(shm.traits.Wait.Spin, 0, false)
				p.Contended = time.Millisecond
				return p
			}()},
		{"shm alone, a CPU each, contended none", Options{Contended: -1}, []*device{shm}, 2, 2, usual(shm.traits.Wait.Spin, 0, false)},
	} {
		assert.Equal(t, c.want, waitPolicy(c.o, c.devs, c.local, c.cpus), c.name)
	}
}

// The default ring depth: deep enough for a window of 64 of the largest
// ring messages while the ranks are few, shallower as they grow so that a
// rank's ring window (one ring per rank) stays near ringWinBudget, and
// never below minDefaultRingLines.
func TestDefaultRingLines(t *testing.T) {
	for _, c := range []struct{ ranks, lines int }{
		{2, 2048}, {8, 2048}, {9, 1024}, {16, 1024}, {17, 512}, {32, 512}, {64, 256}, {1000, 256},
	} {
		n := defaultRingLines(c.ranks)
		assert.Equal(t, c.lines, n, "%d ranks", c.ranks)
		assert.Zero(t, n&(n-1), "%d ranks: %d lines is not a power of two", c.ranks, n)
		if n > minDefaultRingLines {
			assert.LessOrEqual(t, c.ranks*n*ringLine, ringWinBudget, "%d ranks", c.ranks)
		}
	}
	assert.GreaterOrEqual(t, defaultRingLines(2), 64*int(ringLinesFor(2000)), "a window of 64 ring messages of 2000 bytes")
	assert.GreaterOrEqual(t, defaultRingLines(2), 31*ringLines, "31 of the largest, half a window")
}

// How far ahead a burst's writer prefetches: RingAhead messages of one or
// two lines, two of three lines, the next one from four lines on, and
// never nothing, whatever the setting.
func TestRingAheadFor(t *testing.T) {
	for _, c := range []struct{ ahead, lines, want uint32 }{
		{3, 1, 3}, {3, 2, 3}, {3, 3, 2}, {3, 4, 1}, {3, 5, 1}, {3, ringLines, 1},
		{1, 1, 1}, {1, 2, 1}, {1, ringLines, 1},
		{maxRingAhead, 1, maxRingAhead}, {maxRingAhead, 8, 4}, {maxRingAhead, ringLines, 1},
	} {
		assert.Equal(t, c.want, ringAheadFor(c.ahead, c.lines), "RingAhead %d, %d-line messages", c.ahead, c.lines)
	}
	assert.EqualValues(t, 3, ringAheadFor(defaultRingAhead, ringLinesFor(8)), "the default for 8 bytes")
}

// TestHostLoadCrowding: the job's crowding is the worst host's ranks per
// CPU of their masks together; hosts whose ranks published no mask, and
// ranks of unknown host (each a host of its own), count as not crowded.
func TestHostLoadCrowding(t *testing.T) {
	rank := func(host string, mask ...byte) hostInfo {
		return hostInfo{PeerInfo: verbs.PeerInfo{Host: host}, mask: mask}
	}
	for _, c := range []struct {
		name  string
		ranks []hostInfo
		want  float64
	}{
		{"one rank", []hostInfo{rank("a", 1)}, 1},
		{"two ranks, one CPU", []hostInfo{rank("a", 1), rank("a", 1)}, 2},
		{"two ranks, a CPU each", []hostInfo{rank("a", 1), rank("a", 2)}, 1},
		{"the worst host", []hostInfo{rank("a", 3), rank("a", 3), rank("b", 1), rank("b", 1), rank("b", 1), rank("b", 1)}, 4},
		{"a host without masks", []hostInfo{rank("a"), rank("a"), rank("a")}, 0},
		{"one rank without a mask", []hostInfo{rank("a", 1), rank("a"), rank("b", 1)}, 1},
		{"unknown hosts", []hostInfo{rank("", 1), rank("", 1), rank("", 1)}, 1},
		{"4 hosts of 2 ranks, a CPU a host", []hostInfo{rank("h0", 1), rank("h0", 1), rank("h1", 2), rank("h1", 2),
			rank("h2", 1), rank("h2", 1), rank("h3", 2), rank("h3", 2)}, 2},
	} {
		l := hostLoad{}
		for _, h := range c.ranks {
			l.add(h)
		}
		assert.Equal(t, c.want, l.crowding(), c.name)
	}
}

// TestCopyCrossover: the size from which the rendezvous's round trip was
// no longer than the eager one's, interpolated between the sizes around
// the sign change; the first size when the rendezvous won there; 0 when
// it never did.
func TestCopyCrossover(t *testing.T) {
	us := func(v ...float64) []time.Duration {
		d := make([]time.Duration, len(v))
		for i, x := range v {
			d[i] = time.Duration(x * float64(time.Microsecond))
		}
		return d
	}
	sizes := []int{4 << 10, 8 << 10, 16 << 10, 32 << 10}
	for _, tc := range []struct {
		name        string
		eager, rndv []time.Duration
		want        int
	}{
		{"never", us(3, 5, 8, 14), us(5, 6, 9, 15), 0},
		{"first", us(3, 5, 8, 14), us(3, 4, 5, 7), 4 << 10},
		{"midway", us(3, 5, 8, 14), us(5, 5.5, 7, 8), 8<<10 + 8<<10/3},
		{"at a size", us(3, 5, 8, 14), us(4, 5, 6, 7), 8 << 10},
		{"last", us(3, 5, 8, 14), us(5, 6, 9, 13), 16<<10 + 16<<10/2},
	} {
		require.Equal(t, tc.want, copyCrossover(sizes, tc.eager, tc.rndv), tc.name)
	}
}
