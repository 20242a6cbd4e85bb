//go:build linux

package p2p_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/bootstrap"
	"github.com/rdmago/rdmago/internal/affinity"
	"github.com/rdmago/rdmago/p2p"
)

// Ranks of one process that p2p takes for two hosts of two ranks each
// (ranks 0-1 and 2-3): shm between the ranks of a host, tcp across, so
// that every endpoint has two devices, as every rank of a multi-host job
// with several ranks a host has.

// twoHosts is a rendezvous that rewrites the host records a rank reads
// for the transport choice ("p2p/<Name>/host/<rank>": host identity,
// process, hardware devices, CPU mask, the first three ended by a NUL):
// a rank of the other pair gets another host identity, and none has a
// hardware device. (A rank's own record stays as it made it.) With
// sameKernel the other identity is another network namespace of this
// kernel, as a container's on this machine; otherwise another machine's.
type twoHosts struct {
	p2p.Rendezvous
	sameKernel bool
}

func (r twoHosts) Get(ctx context.Context, key string) ([]byte, error) {
	v, err := r.Rendezvous.Get(ctx, key)
	i := strings.LastIndex(key, "/host/")
	if err != nil || !strings.HasPrefix(key, "p2p/") || i < 0 {
		return v, err
	}
	peer, err := strconv.Atoi(key[i+len("/host/"):])
	if err != nil {
		return nil, fmt.Errorf("host record key %q: %w", key, err)
	}
	f := bytes.SplitN(v, []byte{0}, 4)
	if len(f) != 4 {
		return nil, fmt.Errorf("host record %q has %d fields", v, len(f))
	}
	host := f[0]
	switch {
	case peer/2 == r.Rank()/2:
	case r.sameKernel:
		host = fmt.Appendf(nil, "%s-other", host) // the boot id, then another netns
	default:
		host = fmt.Appendf(nil, "other-host/%s", host)
	}
	return bytes.Join([][]byte{host, f[1], nil, f[3]}, []byte{0}), nil
}

// startTwoHosts starts four endpoints as two hosts of two ranks. With
// oneCPU, each rank's thread is pinned to one CPU, the same for all,
// while New reads its affinity: every host's two ranks then share one CPU
// (crowded). sameKernel makes the hosts two network namespaces of this
// machine (twoHosts).
func startTwoHosts(t *testing.T, ctx context.Context, oneCPU, sameKernel bool, o p2p.Options) []*p2p.Endpoint {
	t.Helper()
	const n = 4
	cpus, err := affinity.CPUs()
	require.NoError(t, err)
	stores, err := bootstrap.NewMemory(n)
	require.NoError(t, err)
	o.Provider = "auto"
	o.LivenessTimeout = -1
	eps := make([]*p2p.Endpoint, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			if oneCPU {
				old, err := affinity.PinThread(cpus[0])
				if err != nil {
					errs[r] = err
					return
				}
				defer func() { errs[r] = errors.Join(errs[r], affinity.RestoreThread(old)) }()
			}
			eps[r], errs[r] = p2p.New(ctx, twoHosts{stores[r], sameKernel}, o)
		})
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, ep := range eps {
			if ep != nil {
				wg.Go(func() { _ = ep.Close() })
			}
		}
		wg.Wait()
	})
	require.NoError(t, errors.Join(errs...))
	for _, ep := range eps {
		for peer := range n {
			want := map[bool]string{true: "shm", false: "tcp"}[peer/2 == ep.Rank()/2]
			if peer != ep.Rank() {
				require.Equal(t, want, ep.Transport(peer), "rank %d to rank %d", ep.Rank(), peer)
			}
		}
	}
	return eps
}

// TestCrowdedIncoming: an endpoint over shm and tcp whose host's ranks
// outnumber their CPUs polls with sched_yield and asks the tcp CQ, and
// only it (shm's CQ makes no completions from bytes a goroutine reads),
// for what has arrived; with a CPU each, or an explicit Spin, it keeps
// the usual policy and asks no CQ.
func TestCrowdedIncoming(t *testing.T) {
	cpus, err := affinity.CPUs()
	require.NoError(t, err)
	for _, c := range []struct {
		name      string
		oneCPU    bool
		o         p2p.Options
		crowded   bool
		crowding  float64 // ranks per CPU on the worst host
		osYield   bool
		incoming  []string
		needsCPUs int
	}{
		{"crowded", true, p2p.Options{}, true, 2, true, []string{"tcp"}, 1},
		{"crowded, explicit spin", true, p2p.Options{Spin: 5 * time.Microsecond}, true, 2, false, nil, 1},
		{"a CPU each", false, p2p.Options{}, false, 1, false, nil, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			if len(cpus) < c.needsCPUs {
				t.Skipf("%d CPUs here", len(cpus))
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			for _, ep := range startTwoHosts(t, ctx, c.oneCPU, false, c.o) {
				assert.Equal(t, c.crowded, ep.Crowded(), "rank %d", ep.Rank())
				assert.Equal(t, c.crowding, ep.Crowding(), "rank %d", ep.Rank())
				assert.Equal(t, c.osYield, ep.PollsWithOSYield(), "rank %d", ep.Rank())
				assert.Equal(t, c.incoming, ep.IncomingProviders(), "rank %d", ep.Rank())
			}
		})
	}
}

// TestCrowdedSharedKernel: two hosts that are network namespaces of one
// machine share its CPUs, so its four ranks count together against them
// (Crowded where the machine has fewer than four CPUs), though the
// transports treat them as two hosts (tcp between them) and the job's
// crowding stays the worst host's.
func TestCrowdedSharedKernel(t *testing.T) {
	cpus, err := affinity.CPUs()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, ep := range startTwoHosts(t, ctx, false, true, p2p.Options{}) {
		assert.Equal(t, len(cpus) < 4, ep.Crowded(), "rank %d of 4 on %d CPUs", ep.Rank(), len(cpus))
		assert.Equal(t, len(cpus) < 4, ep.PollsWithOSYield(), "rank %d", ep.Rank())
		assert.Equal(t, max(2/float64(len(cpus)), 1), ep.Crowding(), "rank %d", ep.Rank())
	}
}

// TestCrowdedTwoDevices: crowded endpoints over shm and tcp, whose waits
// poll both CQs with sched_yield and take what has arrived on the tcp
// connections themselves (verbs.Arrivals), complete ping-pongs over each
// device and bursts of eager, pipelined and rendezvous messages across
// the tcp connections, both ways at once, each intact and in order.
func TestCrowdedTwoDevices(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	eps := startTwoHosts(t, ctx, true, false, p2p.Options{})
	for _, ep := range eps {
		require.True(t, ep.PollsWithOSYield(), "rank %d is not crowded", ep.Rank())
	}
	sizes := []int{0, 8, 100, 4 << 10, 40 << 10, 300 << 10}
	msg := func(from, i, n int) []byte {
		b := make([]byte, n)
		for j := range b {
			b[j] = byte(from*31 + i*7 + j)
		}
		return b
	}
	errs := make([]error, len(eps))
	var wg sync.WaitGroup
	for _, ep := range eps {
		wg.Go(func() {
			errs[ep.Rank()] = func() error {
				me := ep.Rank()
				// Ping-pong with the rank of this host (shm), then with its
				// counterpart on the other host (tcp).
				for _, peer := range []int{me ^ 1, me ^ 2} {
					buf := make([]byte, 8)
					for round := range 40 {
						if (me < peer) == (round%2 == 0) {
							if err := ep.Send(ctx, peer, 1, msg(me, round, 8)); err != nil {
								return fmt.Errorf("ping-pong with %d, round %d: %w", peer, round, err)
							}
						} else {
							if _, err := ep.Recv(ctx, peer, 1, buf); err != nil {
								return fmt.Errorf("ping-pong with %d, round %d: %w", peer, round, err)
							}
							if !bytes.Equal(msg(peer, round, 8), buf) {
								return fmt.Errorf("ping-pong with %d, round %d: got %x", peer, round, buf)
							}
						}
					}
				}
				// A burst to the counterpart on the other host while it
				// sends one to this rank.
				peer := me ^ 2
				var reqs []*p2p.Request
				var bufs [][]byte
				for i := range 24 {
					n := sizes[i%len(sizes)]
					bufs = append(bufs, make([]byte, n))
					r, err := ep.Irecv(peer, 2, bufs[i])
					if err != nil {
						return err
					}
					reqs = append(reqs, r)
				}
				for i := range 24 {
					r, err := ep.Isend(peer, 2, msg(me, i, sizes[i%len(sizes)]))
					if err != nil {
						return err
					}
					reqs = append(reqs, r)
				}
				for i, r := range reqs {
					if _, err := r.Wait(ctx); err != nil {
						return fmt.Errorf("burst request %d: %w", i, err)
					}
				}
				for i, b := range bufs {
					if !bytes.Equal(msg(peer, i, len(b)), b) {
						return fmt.Errorf("burst message %d of %d bytes from %d is not intact", i, len(b), peer)
					}
				}
				return nil
			}()
			if errs[ep.Rank()] != nil {
				cancel()
			}
		})
	}
	wg.Wait()
	for r, err := range errs {
		assert.NoError(t, err, "rank %d", r)
	}
}

// TestCrowdedBothWaysPipelined: where a host's ranks outnumber its CPUs, a
// message in the pipelined range over shm stays pipelined even when its
// sender expects a message from its receiver (where a CPU each would make
// it a rendezvous, TestPipelinedRangeBothWays): a rendezvous there waits
// for the receiver's turn on the CPU and then the sender's.
func TestCrowdedBothWaysPipelined(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	eps := startTwoHosts(t, ctx, true, false, p2p.Options{})
	const size = 64 << 10
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for me := range 2 { // the two ranks of the first host
		ep := eps[me]
		wg.Go(func() {
			errs[me] = func() error {
				buf := make([]byte, size)
				if me == 1 {
					if _, err := ep.Recv(ctx, 0, 1, buf); err != nil {
						return err
					}
					return ep.Send(ctx, 0, 2, buf)
				}
				r, err := ep.Irecv(1, 2, buf)
				if err != nil {
					return err
				}
				if err := ep.Send(ctx, 1, 1, make([]byte, size)); err != nil {
					return err
				}
				_, err = r.Wait(ctx)
				return err
			}()
		})
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	ps := eps[0].Stats().Peers[1]
	assert.Equal(t, "shm", eps[0].Transport(1))
	assert.Equal(t, uint64(1), ps.PipeSent.Msgs, "pipelined, a receive from the peer posted")
	assert.Zero(t, ps.RndvSent.Msgs)
}

// TestCrowdedServedChunks: where the host's ranks outnumber its CPUs, a
// rendezvous over tcp under 1 MiB is READ in pieces posted at once
// (verbs.Traits.ReadChunkCrowded); the last piece's report that its
// response is written completes the send (responses go out in order), and
// the sender's buffer is free then.
func TestCrowdedServedChunks(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	eps := startTwoHosts(t, ctx, true, false, p2p.Options{})
	require.True(t, eps[0].Crowded(), "two ranks on one CPU")
	const size = 768 << 10 // six 128 KiB READs; past the crowded tcp pipeline
	fins := p2p.FINOKSent()
	errs := make([]error, 2)
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range 3 {
			buf := pattern(size, byte(i))
			if errs[0] = eps[0].Send(ctx, 2, i, buf); errs[0] != nil {
				return
			}
			clear(buf)
		}
	})
	wg.Go(func() {
		buf := make([]byte, size)
		for i := range 3 {
			if _, errs[1] = eps[2].Recv(ctx, 0, i, buf); errs[1] != nil {
				return
			}
			if !bytes.Equal(buf, pattern(size, byte(i))) {
				errs[1] = fmt.Errorf("message %d: payload differs", i)
				return
			}
		}
	})
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	ps := eps[0].Stats().Peers[2]
	assert.Equal(t, uint64(3), ps.RndvSent.Msgs)
	assert.Equal(t, uint64(3), ps.RndvServed.Msgs, "completed on the last READ's report")
	assert.Zero(t, p2p.FINOKSent()-fins, "no FIN")
}
