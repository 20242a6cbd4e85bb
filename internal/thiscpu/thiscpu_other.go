//go:build !(linux && amd64)

package thiscpu

func id() int { return -1 }
