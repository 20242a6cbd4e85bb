package collectives_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/rdmago/rdmago/collectives"
	"github.com/rdmago/rdmago/collectives/coltest"
	"github.com/rdmago/rdmago/collectives/reduce"
	"github.com/rdmago/rdmago/p2p"
	"github.com/rdmago/rdmago/p2p/p2ptest"
)

func sizeName(n int) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

// benchRanks times iters allreduces of nbytes of float32 on every rank of
// groups and reports nccl-tests' algbw and busbw (algbw·2(p−1)/p). All
// ranks must run the same number of iterations, which b.Loop cannot tell
// the other goroutines, so this loop uses b.N.
func benchRanks(b *testing.B, groups []collectives.Group, opts collectives.Options, nbytes int) {
	p := len(groups)
	engines := make([]*collectives.Engine, p)
	bufs := make([][]float32, p)
	for r, g := range groups {
		e, err := collectives.New(g, opts)
		if err != nil {
			b.Fatal(err)
		}
		engines[r] = e
		bufs[r] = make([]float32, nbytes/4)
		for i := range bufs[r] {
			bufs[r][i] = float32(i % 3)
		}
	}
	defer func() { // Close is collective once a window was exposed: all ranks at once
		var wg sync.WaitGroup
		for _, e := range engines {
			wg.Go(func() { e.Close() })
		}
		wg.Wait()
	}()
	ctx := context.Background()
	run := func(iters int) error {
		errs := make([]error, p)
		var wg sync.WaitGroup
		for r := range p {
			wg.Go(func() {
				for range iters {
					if err := collectives.Allreduce(ctx, engines[r], bufs[r], reduce.Sum); err != nil {
						errs[r] = err
						return
					}
				}
			})
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				return err
			}
		}
		return nil
	}
	if err := run(2); err != nil { // warm the pools and windows
		b.Fatal(err)
	}
	b.SetBytes(int64(nbytes))
	b.ReportAllocs()
	b.ResetTimer()
	if err := run(b.N); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	sec := b.Elapsed().Seconds() / float64(b.N)
	if sec > 0 {
		algbw := float64(nbytes) / sec / 1e9
		b.ReportMetric(algbw, "algbw_GB/s")
		b.ReportMetric(algbw*2*float64(p-1)/float64(p), "busbw_GB/s")
	}
}

var benchSizes = []int{8, 64 << 10, 1 << 20, 16 << 20}

// BenchmarkAllreduce compares the allreduce algorithms (and Auto) over the
// in-memory fake (which copies every message) and over p2p endpoints on the
// shm provider. Run: go test -run x -bench Allreduce ./collectives/
func BenchmarkAllreduce(b *testing.B) {
	algs := append([]collectives.Algorithm{collectives.Auto}, collectives.Algorithms(collectives.CollAllreduce)...)
	for _, p := range []int{2, 4} {
		for _, alg := range algs {
			for _, n := range benchSizes {
				b.Run(fmt.Sprintf("group=fake/algo=%v/ranks=%d/bytes=%s", alg, p, sizeName(n)), func(b *testing.B) {
					wo := worldFor(alg, p)
					if alg == collectives.Hierarchical {
						wo.Hosts = make([]int, p)
						for r := range wo.Hosts {
							wo.Hosts[r] = r / 2
						}
					}
					w := coltest.NewWorld(p, wo)
					groups := make([]collectives.Group, p)
					for r := range groups {
						groups[r] = w.Group(r)
					}
					benchRanks(b, groups, force(collectives.CollAllreduce, alg), n)
				})
			}
		}
	}
	for _, p := range []int{2, 4} {
		eps, err := p2ptest.Start(context.Background(), p, p2ptest.Options{Provider: "shm"})
		if err != nil {
			b.Skipf("shm endpoints: %v", err)
		}
		for i, alg := range algs {
			if alg == collectives.Hierarchical {
				continue
			}
			for j, n := range benchSizes {
				b.Run(fmt.Sprintf("group=p2p-shm/algo=%v/ranks=%d/bytes=%s", alg, p, sizeName(n)), func(b *testing.B) {
					groups := make([]collectives.Group, p)
					for r, ep := range eps {
						ch, err := ep.Channel(uint32(1000 + 100*i + j))
						if err != nil {
							b.Fatal(err)
						}
						groups[r] = &p2pGroup{ep: ep, ch: ch}
					}
					benchRanks(b, groups, force(collectives.CollAllreduce, alg), n)
				})
			}
		}
		p2ptest.Close(eps)
	}
}

var _ = p2p.MaxTag
