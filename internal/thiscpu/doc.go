// Package thiscpu tells which CPU the calling thread runs on, in a few
// nanoseconds and without a system call, where the platform allows it.
//
//	if cpu := thiscpu.ID(); cpu >= 0 {
//		fmt.Println("running on CPU", cpu)
//	}
//
// The answer is a hint: the thread may move to another CPU as soon as ID
// returns (unless its affinity pins it). Policies use it to guess whether
// two threads share a CPU, never for correctness.
//
// On Linux amd64 ID reads the limit of the per-CPU segment the kernel
// keeps in every CPU's descriptor table (the LSL instruction), which is
// how the vDSO's getcpu answers on CPUs without RDPID; it costs about 20
// ns, where the getcpu system call costs a microsecond on a VM with the
// usual mitigations. Elsewhere ID is -1 (unknown). ID is safe for
// concurrent use.
package thiscpu
