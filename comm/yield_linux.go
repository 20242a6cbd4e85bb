package comm

import "golang.org/x/sys/unix"

// osYield gives the CPU to another thread or process (runtime.Gosched only
// switches goroutines).
func osYield() { unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }
