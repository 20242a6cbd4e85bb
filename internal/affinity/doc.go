// Package affinity lists the CPUs a process may run on and starts child
// processes pinned to one of them, as launchers binding ranks to cores do.
//
//	cpus, err := affinity.CPUs() // e.g. [0 1]
//	if err != nil {
//		return err
//	}
//	cmd := exec.Command("rank")
//	err = affinity.StartPinned(cmd, cpus[1]) // cmd runs on CPU 1 only
//
// A child inherits the affinity of the thread that forks it, so pinning a
// child means narrowing that thread's mask for the fork and restoring it
// afterwards, on a thread the goroutine holds locked meanwhile. The
// functions are safe for concurrent use; on systems other than Linux CPUs
// and StartPinned return ErrUnsupported.
package affinity
