package comm

import (
	"context"
	"fmt"
	"testing"

	"golang.org/x/sys/unix"
)

// BenchmarkPersistentAllreduce compares, in one run, a persistent
// allreduce's Start+Wait (api=persistent) with a plain Allreduce
// (api=allreduce, the reference) and Iallreduce+Wait (api=iallreduce), on
// two ranks in this process over shm. Rank 0 drives b.Loop as in
// BenchmarkAllreduce.
//
// cpu-ns/op is the process's CPU time per call, both ranks together.
//
//	go test -run '^$' -bench PersistentAllreduce -benchtime 20000x -count 5 ./comm
func BenchmarkPersistentAllreduce(b *testing.B) {
	for _, n := range []int{2, 16 << 10, 256 << 10} {
		for _, api := range []string{"allreduce", "persistent", "iallreduce"} {
			b.Run(fmt.Sprintf("transport=shm/api=%s/bytes=%d", api, 4*n), func(b *testing.B) {
				// Each rank's goroutine makes and uses its own plan: no
				// lock of the benchmark's in the timed loop.
				var plans [2]*Persistent
				defer func() {
					for _, p := range plans {
						if p != nil {
							p.Free()
						}
					}
				}()
				cpu0 := processCPU(b)
				defer func() { b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op") }()
				benchPair(b, "shm", func(ctx context.Context, c *Comm, buf []float32) error {
					switch api {
					case "persistent":
						p := plans[c.Rank()]
						if p == nil {
							var err error
							if p, err = AllreduceInit(ctx, c, buf, Sum); err != nil {
								return err
							}
							plans[c.Rank()] = p
						}
						if err := p.Start(ctx); err != nil {
							return err
						}
						return p.Wait(ctx)
					case "iallreduce":
						r, err := Iallreduce(ctx, c, buf, Sum)
						if err != nil {
							return err
						}
						_, err = r.Wait(ctx)
						return err
					}
					return Allreduce(ctx, c, buf, Sum)
				}, n)
			})
		}
	}
}

// BenchmarkPersistentOverhead is BenchmarkPersistentAllreduce on one rank:
// no communication, so what is measured is the per-call work of each API
// alone (checks, cost model, turn, closure) without the waits for a peer
// that dominate and blur the two-rank figures on a busy machine.
// cpu-ns/op is the process's CPU time per call (every thread: a
// persistent run may go on its worker's), which a loaded machine disturbs
// far less than ns/op.
//
//	go test -run '^$' -bench PersistentOverhead -count 5 ./comm
func BenchmarkPersistentOverhead(b *testing.B) {
	for _, n := range []int{2, 16 << 10, 256 << 10} {
		for _, api := range []string{"allreduce", "persistent"} {
			b.Run(fmt.Sprintf("ranks=1/api=%s/bytes=%d", api, 4*n), func(b *testing.B) {
				ctx := context.Background()
				c := initWorldWith(b, 1, Options{Transport: "loop"})[0]
				buf := make([]float32, n)
				p, err := AllreduceInit(ctx, c, buf, Sum)
				if err != nil {
					b.Fatal(err)
				}
				defer p.Free()
				b.ReportAllocs()
				cpu0 := processCPU(b)
				for b.Loop() {
					if api == "persistent" {
						if err := p.Start(ctx); err != nil {
							b.Fatal(err)
						}
						err = p.Wait(ctx)
					} else {
						err = Allreduce(ctx, c, buf, Sum)
					}
					if err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
			})
		}
	}
}

// processCPU is the CPU time this process has used, in ns.
func processCPU(b *testing.B) int64 {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Skipf("getrusage: %v", err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
