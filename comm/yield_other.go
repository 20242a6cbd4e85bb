//go:build !linux

package comm

import "runtime"

func osYield() { runtime.Gosched() }
