package ntcopy

import (
	"encoding/binary"
	"fmt"
	"os"
	"unsafe"
)

// Present reports, for each page that b spans, whether this process's page
// table maps it now (bit 63 of its /proc/self/pagemap entry): whether its
// first access has happened or Touch has done it. Tests use it to see that
// memory is mapped ahead of its use.
func Present(b []byte) ([]bool, error) {
	if len(b) == 0 {
		return nil, nil
	}
	f, err := os.Open("/proc/self/pagemap")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	start := uintptr(unsafe.Pointer(unsafe.SliceData(b))) / pageSize
	end := (uintptr(unsafe.Pointer(unsafe.SliceData(b))) + uintptr(len(b)) - 1) / pageSize
	buf := make([]byte, 8*(end-start+1))
	if n, err := f.ReadAt(buf, int64(start*8)); err != nil || n != len(buf) {
		return nil, fmt.Errorf("reading pagemap: %d bytes, %v", n, err)
	}
	out := make([]bool, len(buf)/8)
	for i := range out {
		out[i] = binary.LittleEndian.Uint64(buf[8*i:])&(1<<63) != 0
	}
	return out, nil
}
