package reduce

import "unsafe"

func aligned8(b []byte) bool {
	return uintptr(unsafe.Pointer(unsafe.SliceData(b)))&7 == 0
}
