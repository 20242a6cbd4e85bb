// Package stacks reads this process's goroutine dump for tests that check
// how a goroutine waits (parked in the poller, asleep on a timer, or in a
// system call).
//
//	for _, g := range stacks.All() {
//		if strings.Contains(g.Stack, "(*cq).WaitSleep") {
//			fmt.Println(g.State) // e.g. "IO wait"
//		}
//	}
package stacks

import (
	"runtime"
	"strings"
)

// Goroutine is one goroutine of the dump.
type Goroutine struct {
	State string // what runtime.Stack shows in brackets, without the wait time ("IO wait", "select", "syscall", "running")
	Stack string // its frames
}

// All returns every goroutine of the process (runtime.Stack with a buffer
// grown until the dump fits).
func All() []Goroutine {
	buf := make([]byte, 1<<20)
	n := runtime.Stack(buf, true)
	for n == len(buf) {
		buf = make([]byte, 2*len(buf))
		n = runtime.Stack(buf, true)
	}
	var out []Goroutine
	for _, g := range strings.Split(string(buf[:n]), "\n\n") {
		head, stack, _ := strings.Cut(g, "\n")
		i, j := strings.IndexByte(head, '['), strings.IndexByte(head, ']')
		if !strings.HasPrefix(head, "goroutine ") || i < 0 || j < i {
			continue
		}
		state, _, _ := strings.Cut(head[i+1:j], ",")
		out = append(out, Goroutine{State: state, Stack: stack})
	}
	return out
}
