package p2p_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/rdmago/rdmago/p2p"
	"github.com/rdmago/rdmago/p2p/p2ptest"
)

// The message storm: every rank sends a random plan of messages (many
// tags, sizes from 0 to 8 MiB, both protocols, to every rank including
// itself) while receiving with random patterns (exact, AnySource, AnyTag,
// both, and matched probes). Every payload is verified, and because the
// expected payload of a message depends on its index in its (source, tag)
// stream, any overtaking shows as a wrong payload. Total bytes are capped
// so a run takes seconds; RDMAGO_LONG=1 runs more and bigger storms.
func TestStorm(t *testing.T) {
	type cfg struct {
		prov  string
		ranks int
		cap   int64
		pipe  int // PipelineLimit (tcp pipelines up to 1 MiB by default)
	}
	cfgs := []cfg{{"loop", 2, 24 << 20, 0}, {"loop", 7, 16 << 20, 256 << 10}, {"loop", 16, 12 << 20, 0},
		{"tcp", 4, 12 << 20, 0}, {"shm", 5, 16 << 20, 0}}
	if os.Getenv("RDMAGO_LONG") != "" {
		cfgs = append(cfgs, cfg{"loop", 3, 256 << 20, 1 << 20}, cfg{"loop", 16, 128 << 20, 0}, cfg{"tcp", 8, 128 << 20, 0},
			cfg{"shm", 16, 128 << 20, 64 << 10}, cfg{"auto", 8, 128 << 20, 0})
	}
	for _, c := range cfgs {
		if raceOn {
			c.cap /= 4 // the race detector makes every byte copied ~10x slower
		}
		t.Run(fmt.Sprintf("%s/ranks=%d/pipe=%d", c.prov, c.ranks, c.pipe), func(t *testing.T) {
			seed := uint64(time.Now().UnixNano())
			if v := os.Getenv("RDMAGO_STORM_SEED"); v != "" {
				seed, _ = strconv.ParseUint(v, 10, 64)
			}
			t.Logf("seed %d (RDMAGO_STORM_SEED reproduces)", seed)
			plan := makePlan(seed, c.ranks, c.cap)
			o := p2ptest.Options{Provider: c.prov, Timeout: 120 * time.Second,
				P2P: p2p.Options{EagerLimit: 4096, EagerSlots: 8, PipelineLimit: c.pipe}}
			p2ptest.Run(t, c.ranks, o, func(ctx context.Context, ep *p2p.Endpoint) error {
				return stormRank(ctx, ep, plan, seed)
			})
		})
	}
}

// plan[src][dst][tag] lists the sizes of the messages src sends dst with tag, in order.
type stormPlan [][]map[int][]int

const stormTags = 6

func makePlan(seed uint64, n int, capBytes int64) stormPlan {
	rng := rand.New(rand.NewPCG(seed, 1))
	plan := make(stormPlan, n)
	for s := range plan {
		plan[s] = make([]map[int][]int, n)
		for d := range plan[s] {
			plan[s][d] = map[int][]int{}
		}
	}
	var total int64
	msgs := 40 * n
	for range msgs {
		s, d, tag := rng.IntN(n), rng.IntN(n), rng.IntN(stormTags)
		var size int
		switch x := rng.IntN(100); {
		case x < 10:
			size = 0
		case x < 70:
			size = rng.IntN(4097) // eager
		case x < 92:
			size = 4097 + rng.IntN(256<<10)
		default:
			size = rng.IntN(8<<20 + 1)
		}
		if total+int64(size) > capBytes {
			size = rng.IntN(1024)
		}
		total += int64(size)
		plan[s][d][tag] = append(plan[s][d][tag], size)
	}
	return plan
}

func fillPayload(b []byte, src, dst, tag, k int) {
	x := uint64(src)<<48 ^ uint64(dst)<<32 ^ uint64(tag)<<16 ^ uint64(k) ^ 0x9e3779b97f4a7c15
	var w [8]byte
	for i := 0; i < len(b); i += 8 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		binary.LittleEndian.PutUint64(w[:], x)
		copy(b[i:], w[:])
	}
}

func stormRank(ctx context.Context, ep *p2p.Endpoint, plan stormPlan, seed uint64) error {
	me, n := ep.Rank(), ep.Size()
	rng := rand.New(rand.NewPCG(seed, uint64(me)+2))
	// Sender: everything in the plan, in plan order per (dst, tag), with a
	// window of outstanding requests and destinations interleaved.
	sendErr := make(chan error, 1)
	go func() {
		type msg struct{ dst, tag, k, size int }
		var order []msg
		next := make([][stormTags]int, n)
		for {
			added := false
			for d := range n {
				for tag := range stormTags {
					if k := next[d][tag]; k < len(plan[me][d][tag]) {
						order = append(order, msg{d, tag, k, plan[me][d][tag][k]})
						next[d][tag]++
						added = true
					}
				}
			}
			if !added {
				break
			}
		}
		var window []*p2p.Request
		for _, m := range order {
			buf := make([]byte, m.size)
			fillPayload(buf, me, m.dst, m.tag, m.k)
			r, err := ep.Isend(m.dst, m.tag, buf)
			if err != nil {
				sendErr <- err
				return
			}
			// All sends stay outstanding until the end: receivers take
			// messages in random order, so waiting here for a rendezvous
			// send to be matched could deadlock (an unsafe MPI program).
			window = append(window, r)
		}
		sendErr <- p2p.WaitAll(ctx, window...)
	}()

	// Receiver: remaining[src][tag] counts messages still to come.
	remaining := make([][stormTags]int, n)
	got := make([][stormTags]int, n)
	left := 0
	for s := range n {
		for tag := range stormTags {
			remaining[s][tag] = len(plan[s][me][tag])
			left += remaining[s][tag]
		}
	}
	buf := make([]byte, 8<<20)
	want := make([]byte, 8<<20)
	for ; left > 0; left-- {
		// Pick a message still to come; a pattern it fits guarantees the
		// receive will match something.
		pick := rng.IntN(left)
		src, tag := -1, -1
		for s := range n {
			for tg := range stormTags {
				if pick < remaining[s][tg] && src < 0 {
					src, tag = s, tg
				}
				if src < 0 {
					pick -= remaining[s][tg]
				}
			}
		}
		ps, pt := src, tag
		switch rng.IntN(4) {
		case 1:
			ps = p2p.AnySource
		case 2:
			pt = p2p.AnyTag
		case 3:
			ps, pt = p2p.AnySource, p2p.AnyTag
		}
		var st p2p.Status
		var err error
		if rng.IntN(5) == 0 {
			var m *p2p.Message
			if m, err = ep.Mprobe(ctx, ps, pt); err == nil {
				st, err = m.Recv(ctx, buf[:m.Status().Count])
			}
		} else {
			st, err = ep.Recv(ctx, ps, pt, buf)
		}
		if err != nil {
			return fmt.Errorf("receive %d left (pattern %d/%d): %w", left, ps, pt, err)
		}
		k := got[st.Source][st.Tag]
		sizes := plan[st.Source][me][st.Tag]
		if k >= len(sizes) {
			return fmt.Errorf("unplanned message from %d tag %d #%d", st.Source, st.Tag, k)
		}
		if st.Count != sizes[k] {
			return fmt.Errorf("from %d tag %d #%d: %d bytes, want %d (overtaken?)", st.Source, st.Tag, k, st.Count, sizes[k])
		}
		fillPayload(want[:st.Count], st.Source, me, st.Tag, k)
		for i := 0; i < st.Count; i++ {
			if buf[i] != want[i] {
				return fmt.Errorf("from %d tag %d #%d (%d bytes): payload differs at byte %d", st.Source, st.Tag, k, st.Count, i)
			}
		}
		got[st.Source][st.Tag]++
		remaining[st.Source][st.Tag]--
	}
	return <-sendErr
}
