//go:build !linux

package comm

func threadCPU() int64 { return -1 }
