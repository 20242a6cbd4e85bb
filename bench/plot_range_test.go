package main

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gonum.org/v1/plot"
)

// inside checks that v lies within [lo, hi] with a margin of at least 2 %
// of the axis (log scale): a point on the very edge is drawn half outside.
func inside(t *testing.T, what string, v, lo, hi float64) {
	t.Helper()
	span := math.Log(hi) - math.Log(lo)
	require.Positive(t, span, "%s: empty axis [%v, %v]", what, lo, hi)
	pos := (math.Log(v) - math.Log(lo)) / span
	assert.True(t, pos >= 0.02 && pos <= 0.98, "%s %v sits at %.3f of its axis [%v, %v]: cut at the edge", what, v, pos, lo, hi)
}

// A --busbw run draws its bus bandwidth (a second panel below the latency),
// and every point of every panel lies inside the axes, the first and the
// last included.
func TestPlotBusBWAndWholeRange(t *testing.T) {
	ss := []series{seriesOf(sampleResult(), "")}
	require.Equal(t, []float64{0.001, 4.99}, ss[0].BusBW)
	ps, err := charts("", ss)
	require.NoError(t, err)
	require.Len(t, ps, 2, "latency and bus bandwidth")
	assert.Equal(t, metricLatency, ps[0].Y.Label.Text)
	assert.Equal(t, "Bus bandwidth (GB/s)", ps[1].Y.Label.Text)
	check := func(p *plot.Plot, name string, ys []float64) {
		for i, x := range ss[0].X {
			inside(t, name+" size", x, p.X.Min, p.X.Max)
			inside(t, name+" value", ys[i], p.Y.Min, p.Y.Max)
		}
	}
	check(ps[0], "latency", ss[0].Y)
	check(ps[1], "busbw", ss[0].BusBW)

	// Without bus bandwidth: one panel, still with room at the edges.
	r := sampleResult()
	for i := range r.Rows {
		r.Rows[i].AlgBW, r.Rows[i].BusBW = 0, 0
	}
	ss = []series{seriesOf(r, "")}
	assert.Nil(t, ss[0].BusBW)
	ps, err = charts("", ss)
	require.NoError(t, err)
	require.Len(t, ps, 1)
	check(ps[0], "latency", ss[0].Y)

	// Both panels go into the file.
	dir := t.TempDir()
	for _, f := range []string{"busbw.png", "busbw.svg"} {
		require.NoError(t, drawPlot(filepath.Join(dir, f), "", []series{seriesOf(sampleResult(), "")}))
	}
}
