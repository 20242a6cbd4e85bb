//go:build !linux

package p2p_test

// threadCPU is unknown here (-1).
func threadCPU() int64 { return -1 }
