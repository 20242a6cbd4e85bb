package p2p

import "golang.org/x/sys/unix"

// cpuMask returns the CPUs this process may run on, as a little-endian
// bitmap (bit i of byte i/8 is CPU i), or nil if the kernel does not say.
func cpuMask() []byte {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil
	}
	var out []byte
	for cpu := 0; cpu < len(set)*64; cpu++ {
		if set.IsSet(cpu) {
			for len(out) <= cpu/8 {
				out = append(out, 0)
			}
			out[cpu/8] |= 1 << (cpu % 8)
		}
	}
	return out
}
