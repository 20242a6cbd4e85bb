package reduce

import "unsafe"

// Bytes views s as its bytes, without copying. This and View are the only
// places where rdmago reinterprets element memory: the collectives move
// bytes, and every element type is plain memory without pointers, so the
// view is safe. Both sides of a message must share byte order (every rank of
// a job runs on little-endian hardware of the same kind).
func Bytes[T Element](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(s[0])))
}

// View is the inverse of Bytes: b reinterpreted as elements of T. len(b)
// must be a multiple of T's size (a remainder is dropped) and b must be
// aligned for T, which holds for views of []T and for the collectives'
// scratch buffers (8-byte aligned).
func View[T Element](b []byte) []T {
	var z T
	n := len(b) / int(unsafe.Sizeof(z))
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), n)
}
