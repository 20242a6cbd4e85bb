package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Metrics a series can show.
const (
	metricLatency   = "Latency (us)"
	metricBandwidth = "Bandwidth (MB/s)"
)

// series is one line on a chart: size (bytes) against a metric.
type series struct {
	Label  string
	Metric string
	X, Y   []float64
	// BusBW is nccl-tests' bus bandwidth (GB/s) at each size, from a
	// --busbw run; nil without.
	BusBW []float64
}

// seriesOf turns a saved run into a series: latency for latency and the
// collectives (the average over ranks), bandwidth for bw and bibw, and the
// bus bandwidth of a --busbw run. An empty label becomes "test np=N
// transport algo".
func seriesOf(r *Result, label string) series {
	if label == "" {
		label = fmt.Sprintf("%s np=%d %s", r.Test, r.Ranks, effectiveTransport(r))
		if r.Algo != "" && r.Algo != "auto" {
			label += " " + r.Algo
		}
	}
	s := series{Label: label, Metric: metricLatency}
	if isBW(r.Test) {
		s.Metric = metricBandwidth
	}
	hasBus := false
	for _, row := range r.Rows {
		hasBus = hasBus || row.BusBW > 0
	}
	for _, row := range r.Rows {
		y := row.Latency
		if s.Metric == metricBandwidth {
			y = row.Bandwidth
		}
		s.X = append(s.X, float64(row.Size))
		s.Y = append(s.Y, y)
		if hasBus {
			s.BusBW = append(s.BusBW, row.BusBW)
		}
	}
	return s
}

// parseOSU reads the first table of an OSU-style output (OSU's own
// programs, mpibench, rdmabench): "#" header lines, then "SIZE VALUE ..."
// rows. A header that mentions bandwidth makes it a bandwidth series.
func parseOSU(r io.Reader, label string) (series, error) {
	s := series{Label: label, Metric: metricLatency}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			if len(s.X) > 0 {
				break // the first table ended
			}
			if strings.Contains(strings.ToLower(sc.Text()), "bandwidth") || strings.Contains(sc.Text(), "MB/s") {
				s.Metric = metricBandwidth
			}
			continue
		}
		size, err1 := strconv.ParseFloat(f[0], 64)
		var val float64
		var err2 error = errors.New("no value")
		if len(f) > 1 {
			val, err2 = strconv.ParseFloat(f[1], 64)
		}
		if err1 != nil || err2 != nil {
			if len(s.X) > 0 {
				break
			}
			continue
		}
		s.X, s.Y = append(s.X, size), append(s.Y, val)
	}
	if err := sc.Err(); err != nil {
		return s, err
	}
	if len(s.X) == 0 {
		return s, errors.New("no OSU-style rows (\"SIZE VALUE\" lines)")
	}
	return s, nil
}

// loadSeries reads a plot argument: FILE or FILE=LABEL, where FILE is an
// rdmabench JSON run or an OSU-style text output.
func loadSeries(arg string) (series, error) {
	path, label, _ := strings.Cut(arg, "=")
	b, err := os.ReadFile(path)
	if err != nil {
		return series{}, err
	}
	if t := bytes.TrimSpace(b); len(t) > 0 && t[0] == '{' {
		r, err := readJSON(path)
		if err != nil {
			return series{}, err
		}
		return seriesOf(r, label), nil
	}
	if label == "" {
		label = strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	}
	s, err := parseOSU(bytes.NewReader(b), label)
	if err != nil {
		return s, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// metricBusBW is the second panel of runs with nccl-tests' bus bandwidth.
const metricBusBW = "Bus bandwidth (GB/s)"

// drawPlot draws the series (one metric) against message size on log-log
// axes into path (.png or .svg), with a second panel below for the bus
// bandwidth when a series has it. Points with a zero size or value cannot
// sit on a log axis and are left out.
func drawPlot(path, title string, ss []series) error {
	ext := strings.ToLower(filepath.Ext(path))
	if ext != ".png" && ext != ".svg" {
		return fmt.Errorf("%q: the file name must end in .png or .svg", path)
	}
	ps, err := charts(title, ss)
	if err != nil {
		return err
	}
	w, h := 7*vg.Inch, 4.5*vg.Inch
	if len(ps) == 1 {
		return ps[0].Save(w, h, path)
	}
	h = 8 * vg.Inch
	c, err := draw.NewFormattedCanvas(w, h, ext[1:])
	if err != nil {
		return err
	}
	rows := make([][]*plot.Plot, len(ps))
	for i, p := range ps {
		rows[i] = []*plot.Plot{p}
	}
	tiles := draw.Tiles{Rows: len(ps), Cols: 1, PadY: vg.Points(12), PadTop: vg.Points(4), PadBottom: vg.Points(4)}
	for i, dc := range plot.Align(rows, tiles, draw.New(c)) {
		ps[i].Draw(dc[0])
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := c.WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// charts builds the chart of the series' metric and, when some series has
// a bus bandwidth, the bus bandwidth chart to go below it, in the same
// colours and shapes.
func charts(title string, ss []series) ([]*plot.Plot, error) {
	if len(ss) == 0 {
		return nil, errors.New("nothing to plot")
	}
	metric := ss[0].Metric
	for _, s := range ss {
		if s.Metric != metric {
			return nil, fmt.Errorf("cannot draw %q (%s) on the same chart as %q (%s)", s.Label, s.Metric, ss[0].Label, metric)
		}
	}
	if title == "" {
		title = ss[0].Label
		if len(ss) > 1 {
			title = metric + " against message size"
		}
	}
	main := newChart(title, metric)
	main.Legend.Top = metric == metricLatency // bandwidth rises to the top right
	bus := newChart("", metricBusBW)
	points, busPoints := 0, 0
	for i, s := range ss {
		n, err := addLine(main, i, s.Label, s.X, s.Y)
		if err != nil {
			return nil, err
		}
		points += n
		if s.BusBW != nil {
			n, err := addLine(bus, i, s.Label, s.X, s.BusBW)
			if err != nil {
				return nil, err
			}
			busPoints += n
		}
	}
	if points == 0 {
		return nil, errors.New("nothing to plot: no point with a positive size and value")
	}
	ps := []*plot.Plot{main}
	if busPoints > 0 {
		ps = append(ps, bus)
	}
	for _, p := range ps {
		widen(&p.X)
		widen(&p.Y)
	}
	return ps, nil
}

// newChart is an empty log-log chart of metric against message size.
func newChart(title, metric string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "Message size (bytes)"
	p.Y.Label.Text = metric
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker = sizeTicks{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Add(plotter.NewGrid())
	p.Legend.Top, p.Legend.Left = true, true
	return p
}

// addLine draws the points of xs, ys that can sit on log axes as series i's
// line and marks, and returns how many there were.
func addLine(p *plot.Plot, i int, label string, xs, ys []float64) (int, error) {
	var xy plotter.XYs
	for j := range xs {
		if xs[j] > 0 && ys[j] > 0 {
			xy = append(xy, plotter.XY{X: xs[j], Y: ys[j]})
		}
	}
	if len(xy) == 0 {
		return 0, nil
	}
	l, pts, err := plotter.NewLinePoints(xy)
	if err != nil {
		return 0, err
	}
	c := plotutil.Color(i)
	l.Color, pts.Color = c, c
	l.Width = vg.Points(1.5)
	pts.Shape = plotutil.Shape(i)
	p.Add(l, pts)
	p.Legend.Add(label, l, pts)
	return len(xy), nil
}

// widen moves a log axis' ends beyond the data by 5 % of its span (at
// least a factor 1.1): the data range ends exactly at the extreme points,
// whose marks the chart's edge would cut in half.
func widen(a *plot.Axis) {
	lo, hi := math.Log(a.Min), math.Log(a.Max)
	m := max(0.05*(hi-lo), math.Log(1.1))
	a.Min, a.Max = math.Exp(lo-m), math.Exp(hi+m)
}

// sizeTicks labels powers of two with B, KiB, MiB, GiB, every other power.
type sizeTicks struct{}

func (sizeTicks) Ticks(lo, hi float64) []plot.Tick {
	var t []plot.Tick
	for e := 0; e < 40; e++ {
		v := float64(uint64(1) << e)
		if v < lo || v > hi {
			continue
		}
		label := ""
		if e%2 == 0 || hi/lo < 64 {
			label = humanSize(uint64(v))
		}
		t = append(t, plot.Tick{Value: v, Label: label})
	}
	return t
}

func humanSize(v uint64) string {
	switch {
	case v >= 1<<30 && v%(1<<30) == 0:
		return fmt.Sprintf("%dG", v>>30)
	case v >= 1<<20 && v%(1<<20) == 0:
		return fmt.Sprintf("%dM", v>>20)
	case v >= 1<<10 && v%(1<<10) == 0:
		return fmt.Sprintf("%dK", v>>10)
	}
	return strconv.FormatUint(v, 10)
}

const plotUsage = `usage: rdmabench plot [-o FILE.png|svg] [-title TEXT] FILE[=LABEL]...

Overlays saved runs on one log-log chart: rdmabench --json files and OSU-style
text outputs (osu_latency, mpibench, rdmabench's own table; the first table
of each file is used). All inputs must show the same metric (latency or
bandwidth).
`

// plotCmd is "rdmabench plot".
func plotCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("rdmabench plot", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, plotUsage) }
	out := fs.String("o", "rdmabench.png", "output file (.png or .svg)")
	title := fs.String("title", "", "chart title")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return errors.New("no input files")
	}
	var ss []series
	for _, a := range fs.Args() {
		s, err := loadSeries(a)
		if err != nil {
			return err
		}
		ss = append(ss, s)
	}
	if err := drawPlot(*out, *title, ss); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s (%d series)\n", *out, len(ss))
	return nil
}

// effectiveTransport is the transport every pair of ranks used, when they
// all used one, else what was asked for ("auto").
func effectiveTransport(r *Result) string {
	seen := ""
	for i, peers := range r.Transports {
		for j, t := range peers {
			if i == j {
				continue
			}
			if seen != "" && t != seen {
				return r.Transport
			}
			seen = t
		}
	}
	if seen == "" {
		return r.Transport
	}
	return seen
}
