package main

import (
	"bytes"
	"regexp"
	"runtime"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/internal/affinity"
)

// linelat prints the median, least and most of its batches' one-way
// times, for the two CPUs it ran on.
func TestLinelatMeasures(t *testing.T) {
	cpus, err := affinity.CPUs()
	if err != nil || len(cpus) < 2 {
		t.Skipf("needs two CPUs to pin to (%v, %v)", cpus, err)
	}
	var out, errOut bytes.Buffer
	require.NoError(t, linelatCmd([]string{"-n", "2000", "-batches", "3"}, &out, &errOut), errOut.String())
	m := regexp.MustCompile(`^linelat CPU (\d+) - CPU (\d+): (\d+) ns one way \(median of 3 batches of 2000 round trips; (\d+)-(\d+)\)\n$`).
		FindStringSubmatch(out.String())
	require.NotNil(t, m, "output %q", out.String())
	assert.Equal(t, strconv.Itoa(cpus[0]), m[1])
	assert.Equal(t, strconv.Itoa(cpus[1]), m[2])
	med, _ := strconv.Atoi(m[3])
	lo, _ := strconv.Atoi(m[4])
	hi, _ := strconv.Atoi(m[5])
	assert.True(t, lo > 0 && lo <= med && med <= hi, "least %d, median %d, most %d", lo, med, hi)
}

// Bad arguments get an error that names what is wrong, and a side that
// cannot finish in time ends the command with an error, not a hang.
func TestLinelatErrors(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		want  string
		linux bool // the check needs CPUs to pin to
	}{
		{[]string{"-cpus", "0,0"}, `-cpus "0,0": the two CPUs must differ`, false},
		{[]string{"-cpus", "0"}, `-cpus "0": want two CPUs, A,B`, false},
		{[]string{"-cpus", "x,1"}, `-cpus "x,1": "x" is not a CPU number`, false},
		{[]string{"-n", "0"}, "-n 0, -batches 9: both must be at least 1", false},
		{[]string{"extra"}, `unexpected argument "extra"`, false},
		{[]string{"-cpus", "0,4095"}, "pin to CPU 4095", true},
		{[]string{"-n", "1000000", "-timeout", "1ms"}, "within 1ms", true},
	} {
		if tc.linux {
			if cpus, err := affinity.CPUs(); err != nil || len(cpus) < 2 || runtime.GOOS != "linux" {
				continue
			}
		}
		var out, errOut bytes.Buffer
		err := linelatCmd(tc.args, &out, &errOut)
		if assert.Error(t, err, "%v", tc.args) {
			assert.Contains(t, err.Error(), tc.want, "%v", tc.args)
		}
		assert.Empty(t, out.String(), "%v", tc.args)
	}
	// Through the command: status 1 with the error on stderr, 0 for -h.
	var out, errOut bytes.Buffer
	assert.Equal(t, 1, run(t.Context(), []string{"linelat", "-cpus", "0,0"}, &out, &errOut))
	assert.Contains(t, errOut.String(), "rdmabench linelat: -cpus")
	errOut.Reset()
	assert.Equal(t, 0, run(t.Context(), []string{"linelat", "-h"}, &out, &errOut))
	assert.Contains(t, errOut.String(), "usage: rdmabench linelat")
}
