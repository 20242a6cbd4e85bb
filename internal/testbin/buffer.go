package testbin

import (
	"bytes"
	"sync"
)

// Buffer is a bytes.Buffer that a command's output goroutine and the test
// may use at once (an exec.Cmd's Stdout while the test reads it).
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
