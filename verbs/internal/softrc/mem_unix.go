//go:build unix

package softrc

import (
	"os"

	"golang.org/x/sys/unix"
)

// allocMem maps n zeroed bytes of anonymous memory, off the Go heap and at a
// stable address, so that a region's virtual address is real and the
// garbage collector never moves or scans it.
func allocMem(n int) (buf []byte, free func(), err error) {
	page := os.Getpagesize()
	size := (n + page - 1) / page * page
	m, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return nil, nil, err
	}
	return m[:n:n], func() { _ = unix.Munmap(m) }, nil
}
