// Command ibvstack is the rank program of the whole-stack test on real
// verbs: rdmarun → comm → collectives → p2p → verbs/ibv, run by
// .ci/rxe-tests.sh inside the Soft-RoCE VM (build it with -tags rdma).
//
//	go build -tags rdma -o /tmp/x/ibvstack ./internal/ibvstack
//	go build -o /tmp/x/rdmarun ./cmd/rdmarun
//	rdmarun -np 4 --transport ibv /tmp/x/ibvstack -device rxe0       # inside the VM
//	rdmarun -np 4 --transport ibv /tmp/x/ibvstack -device rxe1,rxe2  # alternating
//	rdmarun -np 4 --transport tcp ./internal/ibvstack -want tcp   # anywhere
//
// Every rank joins with comm.FromEnv (the real RDMARUN_* contract), checks
// that every peer is reached over the -want transport, and then runs, with
// every result checked exactly (integer-valued floats sum exactly in any
// order):
//   - Allreduce at sizes from one element through the eager limit to 1 MiB
//     and beyond (float64 and float32 Sum, int64 Max), checking that the
//     large ones moved their data by RDMA (rendezvous READs or one-sided
//     WRITEs, from the endpoint's counters);
//   - Bcast of a small and a large buffer from non-zero roots;
//   - rounds of Barrier, each with a different rank arriving late: when
//     every rank shares one kernel (one clock), no rank may leave a barrier
//     before the late rank entered it.
//
// A failed check does not stop a rank (the others would hang in the next
// collective); the ranks count them and agree on the total with a last
// allreduce. Each rank then prints one line,
//
//	ibvstack: rank 1/4 pass device=rxe0 transport=ibv,self,ibv,ibv allreduce=8 bcast=2 barrier=4 rdma_msgs=36 rdma_bytes=11649216 algorithms=allreduce:recursive_doubling,...
//
// ("FAIL" and the failed checks on stderr otherwise), and rank 0, when
// every rank passed, a last line
//
//	ibvstack: OK ranks=4 transport=ibv
//
// The exit status is 0 only when every rank passed. A communication error
// ends the rank at once with the error (rdmarun then stops the job).
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rdmago/rdmago/comm"
	"github.com/rdmago/rdmago/p2p"
	"github.com/rdmago/rdmago/verbs"
	"github.com/rdmago/rdmago/verbs/ibv"
)

var (
	want    = flag.String("want", "ibv", "the transport every peer must be reached over (empty: any)")
	devices = flag.String("device", "", "verbs device for the endpoint (ibv: dev[:port[:gid]]; empty: the provider's choice); "+
		"a comma-separated list gives local rank i the (i mod n)-th")
	timeout = flag.Duration("timeout", 2*time.Minute, "deadline of the whole run")
	rounds  = flag.Int("barriers", 4, "barrier rounds, each with another rank arriving late")
	late    = flag.Duration("late", 30*time.Millisecond, "how late the late rank of a barrier round arrives")
)

func main() {
	flag.Parse()
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "ibvstack: %v\n", err)
		os.Exit(1)
	}
}

// checker counts failed checks and reports each on stderr.
type checker struct {
	rank, size int
	failed     int
	passed     map[string]int // checks passed, per collective
	algs       []string       // "collective:algorithm" as they ran, without repeats
}

// ran notes the algorithm of the collective that just ran.
func (k *checker) ran(coll string, c *comm.Comm) {
	a := coll + ":" + c.LastAlgorithm()
	if !slices.Contains(k.algs, a) {
		k.algs = append(k.algs, a)
	}
}

func (k *checker) failf(format string, args ...any) {
	k.failed++
	fmt.Fprintf(os.Stderr, "ibvstack: rank %d/%d: "+format+"\n", append([]any{k.rank, k.size}, args...)...)
}

func (k *checker) pass(coll string) { k.passed[coll]++ }

// rdma sums, over every peer, the traffic that moved by RDMA rather than
// through eager buffers: rendezvous messages (READ into the receiver's
// buffer) and one-sided window writes.
func rdma(s comm.Stats) (msgs, bytes uint64) {
	for _, p := range s.Peers {
		for _, c := range []p2p.Counter{p.RndvSent, p.RndvRecv, p.WriteSent} {
			msgs += c.Msgs
			bytes += c.Bytes
		}
	}
	return msgs, bytes
}

// pickDevice chooses this rank's device from a comma-separated list by
// its local rank, as a job would give each rank on a host its own NIC
// (docs/env.md: RDMARUN_LOCAL_RANK is there for that).
func pickDevice(list string) (string, error) {
	names := strings.Split(list, ",")
	if len(names) == 1 {
		return names[0], nil
	}
	v := os.Getenv("RDMARUN_LOCAL_RANK")
	i, err := strconv.Atoi(v)
	if err != nil || i < 0 {
		return "", fmt.Errorf("-device %q: a list needs the local rank, and RDMARUN_LOCAL_RANK=%q is not one", list, v)
	}
	return names[i%len(names)], nil
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if *want == "ibv" && !ibv.Available {
		return errors.New("-want ibv, but this binary has no ibv provider: build it with -tags rdma")
	}
	// phases: how long each part took on this rank, for the log.
	var phases []string
	t := time.Now()
	phase := func(name string) {
		phases = append(phases, fmt.Sprintf("%s:%.1fs", name, time.Since(t).Seconds()))
		t = time.Now()
	}
	device, err := pickDevice(*devices)
	if err != nil {
		return err
	}
	c, err := comm.FromEnv(ctx, comm.Options{P2P: p2p.Options{Device: verbs.DeviceOptions{Name: device}}})
	if err != nil {
		return err
	}
	defer c.Close()
	p, me := c.Size(), c.Rank()
	k := &checker{rank: me, size: p, passed: map[string]int{}}

	phase("init")

	// Every peer over the wanted transport; one host (one clock) or not.
	oneHost := true
	var transports []string
	for r := range p {
		peer, err := c.Peer(r)
		if err != nil {
			return err
		}
		transports = append(transports, peer.Transport)
		if peer.HostIndex != 0 {
			oneHost = false
		}
		if r != me && *want != "" && peer.Transport != *want {
			k.failf("rank %d is reached over %q, want %q", r, peer.Transport, *want)
		}
	}

	// Allreduce. Values are small integers, so every sum is exact whatever
	// the order of the additions (and the algorithm) is. The sizes cover
	// one element, an odd count, just over the eager limit (16 KiB), 1 MiB
	// and an odd count past it, so that chunked algorithms get unequal
	// chunks; the large ones must have moved data by RDMA.
	for _, n := range []int{1, 7, 1000, 2053, 1 << 17, 1<<17 + 2049} {
		m0, b0 := rdma(c.Stats())
		buf := make([]float64, n)
		for i := range buf {
			buf[i] = float64(me*1000 + i%251)
		}
		if err := comm.Allreduce(ctx, c, buf, comm.Sum); err != nil {
			return fmt.Errorf("allreduce of %d float64: %w", n, err)
		}
		alg := c.LastAlgorithm()
		k.ran("allreduce", c)
		bad := 0
		for i, x := range buf {
			if w := float64(1000*p*(p-1)/2 + p*(i%251)); x != w {
				if bad++; bad <= 3 {
					k.failf("allreduce float64 n=%d (%s): element %d is %v, want %v", n, alg, i, x, w)
				}
			}
		}
		m1, b1 := rdma(c.Stats())
		if n*8 >= 1<<20 && p > 1 && (m1 == m0 || b1 == b0) {
			k.failf("allreduce float64 n=%d (%s): no data moved by RDMA (rendezvous or one-sided write)", n, alg)
		}
		if bad == 0 {
			k.pass("allreduce")
		}
	}
	{ // float32, 1 MiB, values that stay exact in float32 (sums < 2^24).
		n := 1 << 18
		buf := make([]float32, n)
		for i := range buf {
			buf[i] = float32((i + me) % 97)
		}
		if err := comm.Allreduce(ctx, c, buf, comm.Sum); err != nil {
			return fmt.Errorf("allreduce of %d float32: %w", n, err)
		}
		k.ran("allreduce", c)
		bad := 0
		for i, x := range buf {
			w := 0
			for r := range p {
				w += (i + r) % 97
			}
			if x != float32(w) {
				if bad++; bad <= 3 {
					k.failf("allreduce float32 n=%d (%s): element %d is %v, want %d", n, c.LastAlgorithm(), i, x, w)
				}
			}
		}
		if bad == 0 {
			k.pass("allreduce")
		}
	}
	{ // int64 Max: every element's maximum comes from another rank.
		n := 513
		buf := make([]int64, n)
		for i := range buf {
			buf[i] = int64((i+me)%p)<<40 | int64(i)
		}
		if err := comm.Allreduce(ctx, c, buf, comm.Max); err != nil {
			return fmt.Errorf("allreduce of %d int64 (max): %w", n, err)
		}
		k.ran("allreduce", c)
		bad := 0
		for i, x := range buf {
			if w := int64(p-1)<<40 | int64(i); x != w {
				if bad++; bad <= 3 {
					k.failf("allreduce int64 max n=%d (%s): element %d is %#x, want %#x", n, c.LastAlgorithm(), i, x, w)
				}
			}
		}
		if bad == 0 {
			k.pass("allreduce")
		}
	}

	phase("allreduce")

	// Bcast from non-zero roots (the last rank, then rank 1): a small
	// buffer and one well past 1 MiB. Non-roots start from garbage that
	// differs from the root's data.
	for _, t := range []struct{ n, root int }{{100, p - 1}, {1<<18 + 3, 1 % p}} {
		buf := make([]float64, t.n)
		for i := range buf {
			if me == t.root {
				buf[i] = float64(t.root*1000003 + i)
			} else {
				buf[i] = -1 - float64(me)
			}
		}
		if err := comm.Bcast(ctx, c, buf, t.root); err != nil {
			return fmt.Errorf("bcast of %d float64 from root %d: %w", t.n, t.root, err)
		}
		k.ran("bcast", c)
		bad := 0
		for i, x := range buf {
			if w := float64(t.root*1000003 + i); x != w {
				if bad++; bad <= 3 {
					k.failf("bcast n=%d root=%d (%s): element %d is %v, want %v", t.n, t.root, c.LastAlgorithm(), i, x, w)
				}
			}
		}
		if bad == 0 {
			k.pass("bcast")
		}
	}

	phase("bcast")

	// Barrier rounds: in round j rank j%p arrives late. Every rank notes
	// when it entered and left; an allgather of those times then shows
	// whether some rank left before the late one entered. The clocks are
	// comparable only between processes of one kernel, so the check runs
	// when every rank is on one host (as in the VM); otherwise only that
	// the barriers complete.
	times := make([]int64, 2**rounds)
	for j := range *rounds {
		if me == j%p {
			time.Sleep(*late)
		}
		times[2*j] = time.Now().UnixNano()
		if err := comm.Barrier(ctx, c); err != nil {
			return fmt.Errorf("barrier round %d: %w", j, err)
		}
		times[2*j+1] = time.Now().UnixNano()
	}
	all := make([]int64, p*len(times))
	if err := comm.Allgather(ctx, c, times, all); err != nil {
		return fmt.Errorf("allgather of barrier times: %w", err)
	}
	for j := range *rounds {
		lateRank := j % p
		entered := all[lateRank*len(times)+2*j]
		left := times[2*j+1]
		if oneHost && left < entered {
			k.failf("barrier round %d: left %v before rank %d entered", j, time.Duration(entered-left), lateRank)
		} else {
			k.pass("barrier")
		}
	}

	phase("barrier")

	// Everybody learns whether anybody failed.
	total := []int64{int64(k.failed)}
	if err := comm.Allreduce(ctx, c, total, comm.Sum); err != nil {
		return fmt.Errorf("allreduce of the failure counts: %w", err)
	}
	m, b := rdma(c.Stats())
	verdict := "pass"
	if k.failed > 0 {
		verdict = "FAIL"
	}
	fmt.Printf("ibvstack: rank %d/%d %s device=%s transport=%s allreduce=%d bcast=%d barrier=%d rdma_msgs=%d rdma_bytes=%d algorithms=%s time=%s\n",
		me, p, verdict, cmp.Or(device, "auto"), strings.Join(transports, ","), k.passed["allreduce"], k.passed["bcast"], k.passed["barrier"], m, b,
		strings.Join(k.algs, ","), strings.Join(phases, ","))
	if err := c.Close(); err != nil {
		return fmt.Errorf("close: %w", err)
	}
	switch {
	case k.failed > 0:
		return fmt.Errorf("rank %d: %d checks failed", me, k.failed)
	case total[0] > 0:
		return fmt.Errorf("rank %d: %d checks failed on other ranks", me, total[0])
	}
	if me == 0 {
		fmt.Printf("ibvstack: OK ranks=%d transport=%s\n", p, *want)
	}
	return nil
}
