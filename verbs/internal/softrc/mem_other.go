//go:build !unix

package softrc

// allocMem falls back to the Go heap where there is no mmap; the region is
// pinned while registered like user memory.
func allocMem(n int) (buf []byte, free func(), err error) {
	return make([]byte, n), func() {}, nil
}
