package launch

import (
	"bytes"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestForward(t *testing.T) {
	var out, errb bytes.Buffer
	o := &output{tag: true, stdout: &out, stderr: &errb}
	o.forward(strings.NewReader("one\ntwo\nthree"), false, 3, nil)
	assert.Equal(t, "[3] one\n[3] two\n[3] three\n", out.String())

	var got []string
	sink := &lineSink{marker: []byte("MK"), keep: 2, onMarker: func(s string) { got = append(got, s) }}
	o.forward(strings.NewReader("e1\ne2\npartialMK 137\n"), true, 1, sink)
	assert.Equal(t, "[1] e1\n[1] e2\n[1] partial\n", errb.String())
	assert.Equal(t, []string{"137"}, got)
	assert.Equal(t, "partial", sink.lastLine())

	out.Reset()
	o.tag = false
	long := strings.Repeat("x", maxLine*2+10)
	o.forward(strings.NewReader(long+"\nshort\n"), false, 0, nil)
	assert.Equal(t, long+"\nshort\n", out.String())

	out.Reset()
	o.tag = true
	o.forward(strings.NewReader(long+"\n"), false, 0, nil)
	assert.Equal(t, "[0] "+long+"\n", out.String(), "only the first piece of a long line is tagged")
}

// TestForwardNoMixing: lines of concurrent ranks never interleave.
func TestForwardNoMixing(t *testing.T) {
	var out bytes.Buffer
	o := &output{tag: true, stdout: &out, stderr: &out}
	var wg sync.WaitGroup
	for r := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o.forward(strings.NewReader(strings.Repeat(strings.Repeat("ab", 500)+"\n", 200)), r%2 == 0, r, nil)
		}()
	}
	wg.Wait()
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	assert.Len(t, lines, 800)
	for _, l := range lines {
		assert.Regexp(t, `^\[\d\] (ab){500}$`, l)
	}
}
