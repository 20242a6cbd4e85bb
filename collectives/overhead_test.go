package collectives_test

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"

	"github.com/rdmago/rdmago/collectives"
	"github.com/rdmago/rdmago/collectives/reduce"
	"github.com/rdmago/rdmago/internal/cputime"
)

// echoGroup is rank 0 of two whose peer behaves exactly like it: a message
// rank 0 sends to rank 1 is what rank 1 sends back, so it completes rank
// 0's pending receive of the same tag (a two-rank allgather, alltoall or
// reduce_scatter exchanges messages of one shape both ways). Nothing runs
// but the Engine's own code and a copy per message: the benchmark below
// measures the Engine's fixed cost per call and per message.
type echoGroup struct {
	mu      sync.Mutex
	pending []*echoReq // posted receives, oldest first
	free    []*echoReq
}

type echoReq struct {
	g    *echoGroup
	tag  int
	buf  []byte
	n    int
	done bool
}

var errEchoCanceled = errors.New("echo: canceled")

func (g *echoGroup) Rank() int { return 0 }
func (g *echoGroup) Size() int { return 2 }

func (g *echoGroup) get(tag int, buf []byte) *echoReq {
	var r *echoReq
	if n := len(g.free); n > 0 {
		r, g.free = g.free[n-1], g.free[:n-1]
	} else {
		r = &echoReq{g: g}
	}
	r.tag, r.buf, r.n, r.done = tag, buf, 0, false
	return r
}

func (g *echoGroup) Isend(peer, tag int, buf []byte) (collectives.Request, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, r := range g.pending {
		if r.tag == tag {
			r.n = copy(r.buf, buf)
			r.done = true
			g.pending = append(g.pending[:i], g.pending[i+1:]...)
			break
		}
	}
	s := g.get(tag, nil)
	s.n, s.done = len(buf), true
	return s, nil
}

func (g *echoGroup) Irecv(peer, tag int, buf []byte) (collectives.Request, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	r := g.get(tag, buf)
	g.pending = append(g.pending, r)
	return r, nil
}

func (r *echoReq) Wait(ctx context.Context) (int, error) {
	r.g.mu.Lock()
	done, n := r.done, r.n
	r.g.mu.Unlock()
	if done {
		return n, nil
	}
	// Only the Engine's watcher waits here (on the abort tag), until Close.
	<-ctx.Done()
	return 0, ctx.Err()
}

func (r *echoReq) Cancel() {
	g := r.g
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, p := range g.pending {
		if p == r {
			g.pending = append(g.pending[:i], g.pending[i+1:]...)
			r.done = true
		}
	}
}

func (r *echoReq) Release() {
	r.g.mu.Lock()
	r.g.free = append(r.g.free, r)
	r.g.mu.Unlock()
}

// BenchmarkEngineOverhead measures the collectives Engine's own software
// per call of a 16-byte two-rank allgather, alltoall and reduce_scatter
// (one message each way) and reduce (one message), with the peer and the transport replaced by
// echoGroup. cpu-ns/op is the thread's CPU time per call, which a loaded
// machine disturbs much less than ns/op.
//
//	go test -run '^$' -bench EngineOverhead -benchtime 200000x ./collectives
func BenchmarkEngineOverhead(b *testing.B) {
	for _, tc := range smallCalls() {
		b.Run(tc.name, func(b *testing.B) {
			e, err := collectives.New(&echoGroup{}, collectives.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			b.ReportAllocs()
			cpu0 := cputime.Thread()
			if cpu0 < 0 {
				b.Skip("the thread's CPU time cannot be read here")
			}
			for b.Loop() {
				if err := tc.call(e); err != nil {
					b.Fatal(err)
				}
			}
			cputime.Report(b, cpu0)
		})
	}
}

type smallCall struct {
	name string
	call func(e *collectives.Engine) error
}

// smallCalls are 16-byte two-rank calls of the general path, over an
// echoGroup: each sends one message and receives one.
func smallCalls() []smallCall {
	ctx := context.Background()
	send, recv := make([]float32, 8), make([]float32, 8)
	return []smallCall{
		{"allgather", func(e *collectives.Engine) error { return collectives.Allgather(ctx, e, send[:4], recv) }},
		{"alltoall", func(e *collectives.Engine) error { return collectives.Alltoall(ctx, e, send, recv) }},
		{"allreduce_into", func(e *collectives.Engine) error {
			return collectives.AllreduceInto(ctx, e, send[:4], recv[:4], reduce.Sum)
		}},
		{"reduce_scatter", func(e *collectives.Engine) error {
			return collectives.ReduceScatter(ctx, e, send, recv[:4], reduce.Sum)
		}},
		// Rank 0 sends its vector to the root, rank 1: one message out.
		{"reduce", func(e *collectives.Engine) error { return collectives.Reduce(ctx, e, send[:4], reduce.Sum, 1) }},
	}
}

// TestGeneralPathAllocatesNothing: once an Engine has run a call, a
// 16-byte two-rank allgather, alltoall, allreduce into a separate buffer,
// reduce_scatter and reduce over
// messages allocate nothing per call (the call records, message records,
// their staging buffers and the request tracking are all recycled).
func TestGeneralPathAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own")
	}
	for _, tc := range smallCalls() {
		t.Run(tc.name, func(t *testing.T) {
			e, err := collectives.New(&echoGroup{}, collectives.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			var callErr error
			allocs := testing.AllocsPerRun(100, func() {
				if err := tc.call(e); err != nil && callErr == nil {
					callErr = err
				}
			})
			if callErr != nil {
				t.Fatal(callErr)
			}
			if allocs != 0 {
				t.Errorf("%v allocations per call, want 0", allocs)
			}
		})
	}
}
