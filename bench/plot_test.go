package main

import (
	"bytes"
	"image"
	_ "image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDrawPlotPNGAndSVG(t *testing.T) {
	dir := t.TempDir()
	png := filepath.Join(dir, "a.png")
	require.NoError(t, drawPlot(png, "", []series{seriesOf(sampleResult(), "")}))
	f, err := os.Open(png)
	require.NoError(t, err)
	defer f.Close()
	img, format, err := image.Decode(f)
	require.NoError(t, err)
	assert.Equal(t, "png", format)
	assert.Greater(t, img.Bounds().Dx(), 300)
	assert.Greater(t, img.Bounds().Dy(), 200)

	svg := filepath.Join(dir, "a.svg")
	require.NoError(t, drawPlot(svg, "title", []series{seriesOf(sampleResult(), "mine")}))
	b, err := os.ReadFile(svg)
	require.NoError(t, err)
	assert.Contains(t, string(b), "<svg")
	assert.Contains(t, string(b), "mine")

	assert.ErrorContains(t, drawPlot(filepath.Join(dir, "a.gif"), "", []series{seriesOf(sampleResult(), "")}), "must end in .png or .svg")
	assert.ErrorContains(t, drawPlot(png, "", nil), "nothing to plot")
	zero := series{Label: "z", Metric: metricLatency, X: []float64{0}, Y: []float64{1}}
	assert.ErrorContains(t, drawPlot(png, "", []series{zero}), "no point with a positive size")
}

func TestPlotCommandOverlay(t *testing.T) {
	dir := t.TempDir()
	js := filepath.Join(dir, "ours.json")
	require.NoError(t, writeJSON(js, sampleResult()))
	osu := filepath.Join(dir, "ompi.txt")
	require.NoError(t, os.WriteFile(osu, []byte("# OSU MPI Allreduce Latency Test\n# Size       Avg Latency(us)\n4                       0.90\n1048576               106.00\n"), 0o644))
	out := filepath.Join(dir, "cmp.svg")
	var stdout, stderr bytes.Buffer
	require.NoError(t, plotCmd([]string{"-o", out, "-title", "allreduce np=2", js + "=rdmago", osu}, &stdout, &stderr))
	assert.Equal(t, "wrote "+out+" (2 series)\n", stdout.String())
	b, err := os.ReadFile(out)
	require.NoError(t, err)
	for _, s := range []string{"rdmago", "ompi", "allreduce np=2"} {
		assert.True(t, strings.Contains(string(b), s), "legend/title %q missing", s)
	}

	// Latency and bandwidth do not share a chart.
	bw := filepath.Join(dir, "bw.txt")
	require.NoError(t, os.WriteFile(bw, []byte("# Size      Bandwidth (MB/s)\n1 3.1\n2 6.3\n"), 0o644))
	err = plotCmd([]string{"-o", out, js, bw}, &stdout, &stderr)
	assert.ErrorContains(t, err, "cannot draw")
	assert.ErrorContains(t, plotCmd([]string{"-o", out, filepath.Join(dir, "missing.json")}, &stdout, &stderr), "no such file")
	assert.ErrorContains(t, plotCmd([]string{"-o", out}, &stdout, &stderr), "no input files")
}
