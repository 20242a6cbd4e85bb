//go:build !linux

package cputime

// Thread is -1: a thread's CPU time is read on Linux only.
func Thread() int64 { return -1 }

// Wakeups is -1: threads' context switches are read on Linux only.
func Wakeups() int { return -1 }
