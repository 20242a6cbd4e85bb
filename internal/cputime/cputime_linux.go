package cputime

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Thread is the calling thread's CPU time (user and system) in ns, or -1
// when it cannot be read.
func Thread() int64 {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &ru); err != nil {
		return -1
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// Wakeups is the sum of the voluntary context switches of this process's
// threads (each one a thread that slept and was woken), or -1 when
// /proc cannot be read. Threads that exit between reads drop out of it.
func Wakeups() int {
	files, err := filepath.Glob("/proc/self/task/*/status")
	if err != nil || len(files) == 0 {
		return -1
	}
	sum := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // the thread exited
		}
		for l := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "voluntary_ctxt_switches:"); ok {
				if k, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
					sum += k
				}
			}
		}
	}
	return sum
}
