//go:build !linux

package p2p

func cpuMask() []byte { return nil }
