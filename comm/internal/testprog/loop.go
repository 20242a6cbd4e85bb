package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/rdmago/rdmago/comm"
)

var (
	loopUntil = flag.String("loop-until", "", "after the first allreduce, run allreduces until rank 0 sees this file (all ranks stop at the same call)")
	pidDir    = flag.String("piddir", "", "with -loop-until, write rank.N.pid here once looping")
)

// loop runs small allreduces until rank 0 finds the -loop-until file; the
// decision travels in the allreduce (max), so that every rank leaves at
// the same call. A test stops a rank meanwhile and watches the others
// wait for it.
func loop(ctx context.Context, c *comm.Comm) error {
	if *pidDir != "" {
		p := filepath.Join(*pidDir, fmt.Sprintf("rank.%d.pid", c.Rank()))
		if err := os.WriteFile(p+".tmp", []byte(fmt.Sprint(os.Getpid())), 0o644); err != nil {
			return err
		}
		if err := os.Rename(p+".tmp", p); err != nil {
			return err
		}
	}
	for i := 0; ; i++ {
		v := []int32{0}
		if c.Rank() == 0 {
			if _, err := os.Stat(*loopUntil); err == nil {
				v[0] = 1
			}
		}
		if err := comm.Allreduce(ctx, c, v, comm.Max); err != nil {
			return fmt.Errorf("loop %d: %w", i, err)
		}
		if v[0] == 1 {
			fmt.Printf("looped rank=%d calls=%d\n", c.Rank(), i+1)
			return nil
		}
		time.Sleep(time.Millisecond) // a program's work between calls
	}
}
