package collectives_test

import (
	"context"
	"runtime"
	"testing"

	"github.com/rdmago/rdmago/collectives"
	"github.com/rdmago/rdmago/collectives/coltest"
	"github.com/rdmago/rdmago/collectives/reduce"
	"github.com/rdmago/rdmago/internal/cputime"
)

// BenchmarkShmCallOverhead measures the Engine's fixed software per
// shared-memory call: an 8-byte allreduce, bcast, alltoall and
// reduce-scatter forced onto the
// shared-memory algorithm on a one-rank group, which runs begin, the
// call's publish and done words, and end with no peer to wait for (a
// two-rank call's time is mostly the peer's hand-off and, on a busy
// machine, the scheduler). cpu-ns/op is the thread's CPU time per call.
//
//	go test -run '^$' -bench ShmCallOverhead -benchtime 200000x ./collectives
func BenchmarkShmCallOverhead(b *testing.B) {
	ctx := context.Background()
	buf, out := make([]float32, 2), make([]float32, 2)
	for _, tc := range []struct {
		name string
		coll collectives.Collective
		call func(e *collectives.Engine) error
	}{
		{"allreduce", collectives.CollAllreduce, func(e *collectives.Engine) error { return collectives.Allreduce(ctx, e, buf, reduce.Sum) }},
		{"bcast", collectives.CollBcast, func(e *collectives.Engine) error { return collectives.Bcast(ctx, e, buf, 0) }},
		{"alltoall", collectives.CollAlltoall, func(e *collectives.Engine) error { return collectives.Alltoall(ctx, e, buf, out) }},
		{"reduce_scatter", collectives.CollReduceScatter, func(e *collectives.Engine) error {
			return collectives.ReduceScatter(ctx, e, buf, out, reduce.Sum)
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			w := coltest.NewWorld(1, coltest.Options{Shared: true})
			e, err := collectives.New(w.Group(0), force(tc.coll, collectives.SharedMemory))
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			if err := tc.call(e); err != nil {
				b.Fatal(err)
			}
			if a := e.LastAlgorithm(); a != collectives.SharedMemory {
				b.Fatalf("ran %v, want shared_memory", a)
			}
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
