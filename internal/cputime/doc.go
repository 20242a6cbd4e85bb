// Package cputime reads the calling thread's CPU time, which benchmarks
// report per op: unlike wall time it does not grow while other jobs on a
// busy machine hold the CPU.
//
//	runtime.LockOSThread()
//	defer runtime.UnlockOSThread()
//	cpu0 := cputime.Thread()
//	for b.Loop() {
//		work()
//	}
//	cputime.Report(b, cpu0) // cpu-ns/op
//
// Thread is safe to call from any goroutine; it reads the thread the
// goroutine runs on, so a benchmark locks its goroutine to its thread.
// Wakeups counts how often the process's threads were woken, for tests
// that check a path keeps its thread (and its P) rather than handing off.
package cputime
