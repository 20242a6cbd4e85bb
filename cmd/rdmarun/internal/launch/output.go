package launch

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync"
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
func (o *output) forward(r io.Reader, toStderr bool, rank int, sink *lineSink) {
	w := o.stdout
	if toStderr {
		w = o.stderr
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
				o.write(w, prefix, line, midLine)
				midLine = line[len(line)-1] != '\n'
			}
		}
		if err != nil {
			if errors.Is(err, bufio.ErrBufferFull) {
				continue
			}
			if midLine {
				o.write(w, nil, []byte{'\n'}, true)
			}
			return
		}
	}
}

func (o *output) write(w io.Writer, prefix, line []byte, continuation bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.tag && !continuation {
		w.Write(prefix)
	}
	w.Write(line)
}

// printf writes one of rdmarun's own messages to stderr.
func (o *output) printf(format string, args ...any) {
	o.mu.Lock()
	defer o.mu.Unlock()
	fmt.Fprintf(o.stderr, "rdmarun: "+format+"\n", args...)
}
