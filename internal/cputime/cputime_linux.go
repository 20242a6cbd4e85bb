package cputime

import "golang.org/x/sys/unix"

// Thread is the calling thread's CPU time (user and system) in ns, or -1
// when it cannot be read.
func Thread() int64 {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &ru); err != nil {
		return -1
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
