package main

import (
	"flag"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdmago/rdmago/internal/affinity"
)

const linelatUsage = `usage: rdmabench linelat [-cpus A,B] [-n TRIPS] [-batches K] [-timeout D]

Measures how long a cache line takes from one CPU to another: two threads
pinned to CPUs A and B pass a counter back and forth on one line, and the
time of a round trip over two is one transfer. On a VM whose host places
the vCPUs near each other or apart this moves every small-message figure
of any library 2-4x (docs/benchmarks.md); bench/compare.sh and
bench/cross-host.sh note it before each row and after. Prints the median
of K batches of TRIPS round trips.
`

// linelatCmd is "rdmabench linelat".
func linelatCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("rdmabench linelat", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, linelatUsage) }
	cpuList := fs.String("cpus", "", "the two CPUs, A,B (default: the first two this process may run on)")
	trips := fs.Int("n", 20000, "round trips per batch")
	batches := fs.Int("batches", 9, "batches; the median is reported")
	timeout := fs.Duration("timeout", 10*time.Second, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if *trips < 1 || *batches < 1 {
		return fmt.Errorf("-n %d, -batches %d: both must be at least 1", *trips, *batches)
	}
	a, b, err := linelatCPUs(*cpuList)
	if err != nil {
		return err
	}
	per, err := lineTrips(a, b, *trips, *batches, *timeout)
	if err != nil {
		return err
	}
	slices.Sort(per)
	fmt.Fprintf(stdout, "linelat CPU %d - CPU %d: %.0f ns one way (median of %d batches of %d round trips; %.0f-%.0f)\n",
		a, b, per[len(per)/2], *batches, *trips, per[0], per[len(per)-1])
	return nil
}

// linelatCPUs parses -cpus, or picks the first two CPUs this process may
// run on.
func linelatCPUs(list string) (int, int, error) {
	if list == "" {
		cpus, err := affinity.CPUs()
		if err != nil {
			return 0, 0, err
		}
		if len(cpus) < 2 {
			return 0, 0, fmt.Errorf("this process may run on %d CPU (%v): linelat needs two", len(cpus), cpus)
		}
		return cpus[0], cpus[1], nil
	}
	f := strings.Split(list, ",")
	if len(f) != 2 {
		return 0, 0, fmt.Errorf("-cpus %q: want two CPUs, A,B", list)
	}
	var c [2]int
	for i, s := range f {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 0 {
			return 0, 0, fmt.Errorf("-cpus %q: %q is not a CPU number", list, s)
		}
		c[i] = n
	}
	if c[0] == c[1] {
		return 0, 0, fmt.Errorf("-cpus %q: the two CPUs must differ", list)
	}
	return c[0], c[1], nil
}

// lineTrips runs batches of trips round trips of a counter between a
// thread pinned to CPU a and one pinned to CPU b, and returns each batch's
// time per transfer (half a round trip), in ns.
func lineTrips(a, b, trips, batches int, timeout time.Duration) ([]float64, error) {
	// Two threads spin at once: with GOMAXPROCS 1 the second would run
	// only when the scheduler preempts the first.
	if runtime.GOMAXPROCS(0) < 2 {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	}
	var line struct {
		_ [64]byte // the counter alone on its line, whatever the alignment
		v atomic.Uint64
		_ [64]byte
	}
	var stop atomic.Bool
	timer := time.AfterFunc(timeout, func() { stop.Store(true) })
	defer timer.Stop()
	// await spins until the counter reads want; false once stop is set.
	await := func(want uint64) bool {
		for i := 0; line.v.Load() != want; i++ {
			if i&1023 == 1023 && stop.Load() {
				return false
			}
		}
		return true
	}
	total := uint64(trips * batches)
	var wg sync.WaitGroup
	var errB error
	wg.Add(1)
	go func() { // the answering side, on CPU b
		defer wg.Done()
		old, err := affinity.PinThread(b)
		if err != nil {
			errB = err
			stop.Store(true)
			return
		}
		defer affinity.RestoreThread(old)
		for i := uint64(0); i < total; i++ {
			if !await(2*i + 1) {
				return
			}
			line.v.Store(2*i + 2)
		}
	}()
	old, err := affinity.PinThread(a)
	if err != nil {
		stop.Store(true)
		wg.Wait()
		return nil, err
	}
	per := make([]float64, 0, batches)
	i := uint64(0)
	for range batches {
		t0 := time.Now()
		for range trips {
			line.v.Store(2*i + 1)
			if !await(2*i + 2) {
				break
			}
			i++
		}
		if stop.Load() {
			break
		}
		per = append(per, float64(time.Since(t0).Nanoseconds())/float64(2*trips))
	}
	err = affinity.RestoreThread(old)
	stop.Store(true) // releases the other side if this one gave up
	wg.Wait()
	switch {
	case errB != nil:
		return nil, errB
	case err != nil:
		return nil, err
	case len(per) < batches:
		return nil, fmt.Errorf("no answer from CPU %d within %v (%d of %d round trips done)", b, timeout, i, total)
	}
	return per, nil
}
