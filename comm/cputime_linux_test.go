package comm

import "golang.org/x/sys/unix"

// threadCPU is the calling thread's CPU time in ns (-1 if unknown): unlike
// wall time it does not grow while other jobs on a busy machine hold the
// CPU, so a benchmark locked to its thread reports it per op.
func threadCPU() int64 {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &ru); err != nil {
		return -1
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
