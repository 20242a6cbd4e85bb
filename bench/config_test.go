package main

import (
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseArgsDefaults(t *testing.T) {
	for _, tc := range []struct {
		test     string
		min, max int
	}{
		{"latency", 0, 4 << 20},
		{"bw", 1, 4 << 20},
		{"bibw", 1, 4 << 20},
		{"allreduce", 4, 1 << 20},
		{"alltoall", 4, 1 << 20},
		{"barrier", 0, 0},
	} {
		cfg, err := parseArgs([]string{tc.test}, io.Discard)
		require.NoError(t, err, tc.test)
		assert.Equal(t, config{Test: tc.test, Min: tc.min, Max: tc.max, Warmup: -1, Type: "float32", Budget: 250 * time.Millisecond}, cfg, tc.test)
	}
}

func TestParseArgsFlags(t *testing.T) {
	cfg, err := parseArgs([]string{"-m", "8:64K", "allreduce", "-i", "7", "-x", "2", "-c", "-t", "int64",
		"--algo", "ring", "--transport", "tcp", "--busbw", "--json", "a.json", "--plot=a.svg", "--budget", "1s", "--warmup-budget", "30ms", "-q", "--per-rank"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, config{Test: "allreduce", Min: 8, Max: 64 << 10, Iters: 7, Warmup: 2, Validate: true, Type: "int64",
		Algo: "ring", Transport: "tcp", BusBW: true, PerRank: true, JSON: "a.json", Plot: "a.svg", Budget: time.Second, Warm: 30 * time.Millisecond, Quiet: true}, cfg)

	for _, tc := range []struct {
		m        string
		min, max int
	}{
		{"1M", 4, 1 << 20}, // MAX only keeps the default MIN
		{"2", 2, 2},        // ... unless MAX is below it
		{"16:", 16, 16},
		{":2K", 4, 2048},
		{"0:1g", 0, 1 << 30},
	} {
		cfg, err := parseArgs([]string{"bcast", "-m", tc.m}, io.Discard)
		require.NoError(t, err, tc.m)
		assert.Equal(t, [2]int{tc.min, tc.max}, [2]int{cfg.Min, cfg.Max}, tc.m)
	}
}

func TestParseArgsErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "no TEST given"},
		{[]string{"allreduc"}, `unknown TEST "allreduc"`},
		{[]string{"bcast", "reduce"}, "one TEST at a time"},
		{[]string{"allreduce", "-t", "float16"}, `-t "float16": want one of float32, float64, int32, int64`},
		{[]string{"allreduce", "-m", "9:3"}, "MIN 9 is larger than MAX 3"},
		{[]string{"allreduce", "-m", "x"}, `size "x": want a non-negative byte count`},
		{[]string{"allreduce", "-m", "-4"}, `size "-4"`},
		{[]string{"allreduce", "-i", "-1"}, "-i -1"},
		{[]string{"allreduce", "-x", "-3"}, "-x -3"},
		{[]string{"allreduce", "--algo", "bogus"}, `--algo "bogus"`},
		{[]string{"allreduce", "--algo", "bruck"}, "allreduce has no such algorithm"},
		{[]string{"latency", "--algo", "ring"}, "latency is not a collective"},
		{[]string{"bcast", "--transport", "udp"}, `--transport "udp"`},
		{[]string{"bcast", "--plot", "x.jpg"}, `--plot "x.jpg": the file name must end in .png or .svg`},
		{[]string{"bcast", "--budget", "0s"}, "--budget 0s"},
		{[]string{"bcast", "--warmup-budget", "-1s"}, "--warmup-budget -1s"},
		{[]string{"bcast", "--nope"}, "flag provided but not defined: -nope"},
		{[]string{"bcast", "--api", "persistent"}, `--api "persistent": only allreduce has other forms, not bcast`},
		{[]string{"allreduce", "--api", "lazy"}, `--api "lazy": want into, inplace or persistent`},
		{[]string{"latency", "--per-rank"}, "--per-rank: latency has no per-rank times"},
		{[]string{"put_bw", "--per-rank"}, "--per-rank: put_bw has no per-rank times"},
		{[]string{"iallreduce", "--per-rank"}, "--per-rank: iallreduce has no per-rank times"},
	} {
		_, err := parseArgs(tc.args, io.Discard)
		require.Error(t, err, "%q", tc.args)
		assert.Contains(t, err.Error(), tc.want, "%q", tc.args)
	}
}

func TestSizeList(t *testing.T) {
	assert.Equal(t, []int{0, 1, 2, 4, 8}, sizeList(0, 8))
	assert.Equal(t, []int{4, 8, 16}, sizeList(3, 31))
	assert.Equal(t, []int{0}, sizeList(0, 0))
	assert.Empty(t, sizeList(5, 7))
}

// TestCounts: the warm-up is OSU's count, but at least settleAfterGC's
// worth of calls, capped by the warm-up budget (a fifth of the budget
// unless --warmup-budget sets it, as mpibench's -w does whatever its -t),
// and the timed loop by the budget; -x and -i fix them.
func TestCounts(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		name              string
		cfg               config
		osuIters, osuSkip int
		w1                int
		per               float64
		rest, it          int
	}{
		{"OSU's counts fit", config{Budget: 250 * ms, Warmup: -1}, 1000, 100, 4, 1e-4, 95, 1000},
		{"the settling after a collection", config{Budget: 250 * ms, Warmup: -1}, 1000, 100, 4, 1e-6, 2000, 1000},
		{"a fifth of the budget", config{Budget: 50 * ms, Warmup: -1}, 1000, 100, 4, 1e-3, 10, 50},
		{"the warm-up budget", config{Budget: 50 * ms, Warm: 50 * ms, Warmup: -1}, 1000, 100, 4, 1e-3, 50, 50},
		{"at least 5 timed", config{Budget: 50 * ms, Warmup: -1}, 100, 10, 1, 0.1, 0, 5},
		{"-x and -i", config{Budget: 50 * ms, Warm: 50 * ms, Warmup: 20, Iters: 7}, 1000, 100, 4, 1e-3, 15, 7},
	} {
		rest, it := c.cfg.counts(c.osuIters, c.osuSkip, c.w1, c.per)
		assert.Equal(t, [2]int{c.rest, c.it}, [2]int{rest, it}, c.name)
	}
}
