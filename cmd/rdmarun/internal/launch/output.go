package launch

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync"
	"syscall"
)

// maxLine bounds the bytes rdmarun holds for one output line; a longer line
// is written in pieces (only the first carries the tag).
const maxLine = 64 << 10

// output serialises the lines of every rank onto rdmarun's stdout and
// stderr, so lines of different ranks never mix within a line.
type output struct {
	mu     sync.Mutex
	tag    bool
	stdout io.Writer
	stderr io.Writer

	// gone marks a stream (stdout, stderr) whose reader has gone: a write
	// failed with EPIPE (rdmarun ... | head -1). Nothing more is written
	// to it, and goneC is closed so that the job ends.
	gone     [2]bool
	goneName string
	goneC    chan struct{}
}

const (
	toStdout = 0
	toStderr = 1
)

// closed is closed when a stream's reader has gone; closedName is then
// "standard output" or "standard error".
func (o *output) closed() <-chan struct{} {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.goneC == nil {
		o.goneC = make(chan struct{})
	}
	return o.goneC
}

func (o *output) closedName() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.goneName
}

// check notes a write error on stream; the caller holds o.mu.
func (o *output) check(stream int, err error) {
	if err == nil || !errors.Is(err, syscall.EPIPE) || o.gone[stream] {
		return
	}
	o.gone[stream] = true
	if o.goneC == nil {
		o.goneC = make(chan struct{})
	}
	if o.goneName == "" {
		o.goneName = [2]string{"standard output", "standard error"}[stream]
		close(o.goneC)
	}
}

// lineSink receives what a forwarder learns besides the output itself.
type lineSink struct {
	marker   []byte       // remote status marker, nil for local ranks
	onMarker func(string) // called with the text after the marker
	keep     int          // last lines of the stream to remember
	mu       sync.Mutex
	last     []string
}

func (s *lineSink) remember(line []byte) {
	if s == nil || s.keep == 0 {
		return
	}
	l := string(bytes.TrimRight(line, "\r\n"))
	if l == "" {
		return
	}
	s.mu.Lock()
	s.last = append(s.last, l)
	if len(s.last) > s.keep {
		s.last = s.last[1:]
	}
	s.mu.Unlock()
}

func (s *lineSink) lastLine() string {
	if s == nil {
		return ""
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.last) == 0 {
		return ""
	}
	return s.last[len(s.last)-1]
}

// forward copies r to w line by line, with "[rank] " in front of each line
// when tagging is on, until r ends. A last line without a newline gets one.
func (o *output) forward(r io.Reader, stderr bool, rank int, sink *lineSink) {
	stream := toStdout
	if stderr {
		stream = toStderr
	}
	prefix := []byte(fmt.Sprintf("[%d] ", rank))
	br := bufio.NewReaderSize(r, maxLine)
	midLine := false
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			if sink != nil && sink.marker != nil && !midLine {
				if i := bytes.Index(line, sink.marker); i >= 0 {
					rest := bytes.TrimSpace(line[i+len(sink.marker):])
					sink.onMarker(string(rest))
					line = line[:i]
					if len(line) > 0 {
						line = append(line[:len(line):len(line)], '\n')
					}
				}
			}
			if len(line) > 0 {
				if !midLine {
					sink.remember(line)
				}
				o.write(stream, prefix, line, midLine)
				midLine = line[len(line)-1] != '\n'
			}
		}
		if err != nil {
			if errors.Is(err, bufio.ErrBufferFull) {
				continue
			}
			if midLine {
				o.write(stream, nil, []byte{'\n'}, true)
			}
			return
		}
	}
}

func (o *output) write(stream int, prefix, line []byte, continuation bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.gone[stream] {
		return
	}
	w := o.stdout
	if stream == toStderr {
		w = o.stderr
	}
	var err error
	if o.tag && !continuation {
		_, err = w.Write(prefix)
	}
	if err == nil {
		_, err = w.Write(line)
	}
	o.check(stream, err)
}

// printf writes one of rdmarun's own messages to stderr.
func (o *output) printf(format string, args ...any) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.gone[toStderr] {
		return
	}
	_, err := fmt.Fprintf(o.stderr, "rdmarun: "+format+"\n", args...)
	o.check(toStderr, err)
}
