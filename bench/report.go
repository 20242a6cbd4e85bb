package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
)

// Result is one sweep: what ran where, and one Row per message size. It is
// what --json writes and "rdmabench plot" reads.
type Result struct {
	Tool        string     `json:"tool"`    // "rdmabench"
	Version     string     `json:"version"` // comm.Version
	Go          string     `json:"go"`
	Date        string     `json:"date"` // RFC 3339, UTC
	Test        string     `json:"test"`
	Ranks       int        `json:"ranks"`
	Type        string     `json:"type"`          // element type ("byte" for p2p tests)
	Algo        string     `json:"algo"`          // as forced with --algo, or "auto"
	API         string     `json:"api,omitempty"` // allreduce's --api, when given
	Transport   string     `json:"transport"`
	Transports  [][]string `json:"transports"` // [rank][peer] as each rank sees it
	Links       []Link     `json:"links,omitempty"`
	Network     *Link      `json:"network,omitempty"`         // measured at start-up (comm.MeasuredNetwork); Peer -1
	SingleCopy  int        `json:"single_copy_min,omitempty"` // measured at start-up (comm.SingleCopyMin)
	Host        string     `json:"host"`
	CPU         string     `json:"cpu"`
	CPUFeatures []string   `json:"cpu_features"`
	Validated   bool       `json:"validated"`
	Interrupted bool       `json:"interrupted,omitempty"`
	Rows        []Row      `json:"rows"`
}

// Link is rank 0's cost-model estimate of its link to a peer (comm.Peer:
// the transport's, or the network Init measured between hosts where that
// is clearly slower), for the first peer on its host and the first on
// another.
type Link struct {
	Peer      int     `json:"peer"`
	SameHost  bool    `json:"same_host"`
	LatencyUS float64 `json:"latency_us"`
	GBps      float64 `json:"gbps"` // 10^9 bytes/s
}

// Row is one message size. Latencies are in microseconds, Bandwidth in MB/s
// (10^6 bytes/s, as OSU), AlgBW and BusBW in GB/s (10^9, as nccl-tests).
type Row struct {
	Size      int     `json:"size"`
	Iters     int     `json:"iters"`
	Latency   float64 `json:"latency_us,omitempty"` // average over ranks for collectives
	Min       float64 `json:"min_us,omitempty"`
	Max       float64 `json:"max_us,omitempty"`
	Bandwidth float64 `json:"bandwidth_mbps,omitempty"`
	AlgBW     float64 `json:"algbw_gbps,omitempty"`
	BusBW     float64 `json:"busbw_gbps,omitempty"`
	Algorithm string  `json:"algorithm,omitempty"`
	// Ranks is every rank's own average time a call, by rank (--per-rank,
	// the collective tests): which rank a Min or Max is, e.g. a reduce's
	// root against the ranks that only send.
	Ranks []float64 `json:"ranks_us,omitempty"`
	// iallreduce: Latency is the overlapped call's time (OSU's Overall),
	// Compute the computation's in it, Pure the collective's alone, and
	// Overlap the share of Pure hidden behind the computation, in %.
	Compute float64 `json:"compute_us,omitempty"`
	Pure    float64 `json:"pure_us,omitempty"`
	Overlap float64 `json:"overlap_pct,omitempty"`
}

// busFactor is nccl-tests' factor from algorithm bandwidth to bus bandwidth
// for p ranks: the share of the data that crosses some link per rank in an
// optimal algorithm, so that busbw can be compared with the link speed.
func busFactor(test string, p int) float64 {
	if p <= 1 {
		return 0
	}
	n := float64(p)
	switch test {
	case "allreduce":
		return 2 * (n - 1) / n
	case "allgather", "reduce_scatter", "alltoall":
		return (n - 1) / n
	case "bcast", "reduce":
		return 1
	}
	return 0
}

// ncclBytes is the "size" nccl-tests divides by the time, given the OSU size
// in the Size column: the whole output of allgather, the whole input of
// reduce-scatter and alltoall, the buffer of the others. rdmabench's Size
// column keeps OSU's meaning: per-rank contribution for allgather, per-pair
// block for alltoall, whole send buffer for reduce_scatter.
func ncclBytes(test string, size, p int) int {
	switch test {
	case "allgather", "alltoall":
		return size * p
	}
	return size
}

// fillBW sets the algbw and busbw columns of r from its average latency.
func fillBW(r *Row, test string, p int) {
	if r.Latency <= 0 || test == "barrier" {
		return
	}
	r.AlgBW = float64(ncclBytes(test, r.Size, p)) / (r.Latency * 1e-6) / 1e9
	r.BusBW = r.AlgBW * busFactor(test, p)
}

// writeHeader prints the "#" lines that describe the run. OSU parsers skip
// them.
func writeHeader(w io.Writer, r *Result) {
	fmt.Fprintf(w, "# rdmabench %s (%s) %s\n", r.Version, r.Go, r.Date)
	t := r.Type
	if t == "" {
		t = "byte"
	}
	api := ""
	if r.API != "" {
		api = ", api " + r.API
	}
	fmt.Fprintf(w, "# test %s%s, %d ranks, type %s, algorithm %s, transport %s%s\n",
		r.Test, api, r.Ranks, t, r.Algo, r.Transport, map[bool]string{true: ", every result validated"}[r.Validated])
	fmt.Fprintf(w, "# host %s, cpu %s\n", r.Host, r.CPU)
	if len(r.CPUFeatures) > 0 {
		fmt.Fprintf(w, "# cpu features %s\n", strings.Join(r.CPUFeatures, " "))
	}
	for i, peers := range r.Transports {
		if i == 16 {
			fmt.Fprintf(w, "# ... (%d more ranks)\n", len(r.Transports)-16)
			break
		}
		var b strings.Builder
		for j, t := range peers {
			if j == i {
				continue
			}
			fmt.Fprintf(&b, " %d=%s", j, t)
		}
		if b.Len() == 0 {
			b.WriteString(" (no peers)")
		}
		fmt.Fprintf(w, "# rank %d peers%s\n", i, b.String())
	}
	if len(r.Links) > 0 {
		var b strings.Builder
		for _, l := range r.Links {
			where := "other host"
			if l.SameHost {
				where = "same host"
			}
			fmt.Fprintf(&b, " %d (%s) %.2fus %.2fGB/s", l.Peer, where, l.LatencyUS, l.GBps)
		}
		fmt.Fprintf(w, "# rank 0 link estimates%s\n", b.String())
	}
	if n := r.Network; n != nil {
		fmt.Fprintf(w, "# network between hosts measured at start-up: %.2fus %.2fGB/s\n", n.LatencyUS, n.GBps)
	}
	if r.SingleCopy > 0 {
		fmt.Fprintf(w, "# one kernel copy beat two through shared memory, measured at start-up, above %d bytes\n", r.SingleCopy)
	}
}

// writeColumns prints the OSU column header line for the test; ranks is
// the number of per-rank columns after the algorithm (0: none).
func writeColumns(w io.Writer, test string, busbw bool, ranks int) {
	switch {
	case test == "iallreduce":
		fmt.Fprintf(w, "# %-10s %18s %17s %17s %11s %11s  %s\n", "Size", "Overall(us)", "Compute(us)", "Pure Comm.(us)", "Overlap(%)", "Iters", "Algorithm")
	case isLatency(test):
		fmt.Fprintf(w, "# %-10s %18s %11s\n", "Size", "Latency (us)", "Iters")
	case isBW(test):
		fmt.Fprintf(w, "# %-10s %18s %11s\n", "Size", "Bandwidth (MB/s)", "Iters")
	default:
		fmt.Fprintf(w, "# %-10s %18s %17s %17s %11s", "Size", "Avg Latency(us)", "Min Latency(us)", "Max Latency(us)", "Iters")
		if busbw {
			fmt.Fprintf(w, " %12s %12s", "algbw(GB/s)", "busbw(GB/s)")
		}
		if ranks == 0 {
			fmt.Fprintf(w, "  %s\n", "Algorithm")
			return
		}
		fmt.Fprintf(w, "  %-20s", "Algorithm")
		for i := range ranks {
			fmt.Fprintf(w, " %12s", fmt.Sprintf("rank%d(us)", i))
		}
		fmt.Fprintln(w)
	}
}

// writeRow prints one data row: the size first and the figure second, as OSU
// parsers (osu-compare) expect.
func writeRow(w io.Writer, test string, busbw bool, r Row) {
	switch {
	case test == "iallreduce":
		fmt.Fprintf(w, "%-12d %18.2f %17.2f %17.2f %11.2f %11d  %s\n", r.Size, r.Latency, r.Compute, r.Pure, r.Overlap, r.Iters, r.Algorithm)
	case isLatency(test):
		fmt.Fprintf(w, "%-12d %18.2f %11d\n", r.Size, r.Latency, r.Iters)
	case isBW(test):
		fmt.Fprintf(w, "%-12d %18.2f %11d\n", r.Size, r.Bandwidth, r.Iters)
	default:
		fmt.Fprintf(w, "%-12d %18.2f %17.2f %17.2f %11d", r.Size, r.Latency, r.Min, r.Max, r.Iters)
		if busbw {
			fmt.Fprintf(w, " %12.3f %12.3f", r.AlgBW, r.BusBW)
		}
		if len(r.Ranks) == 0 {
			fmt.Fprintf(w, "  %s\n", r.Algorithm)
			return
		}
		// After the algorithm, so that the size and the average stay the
		// first two fields for OSU parsers (osu-compare, plot).
		fmt.Fprintf(w, "  %-20s", r.Algorithm)
		for _, v := range r.Ranks {
			fmt.Fprintf(w, " %12.2f", v)
		}
		fmt.Fprintln(w)
	}
}

// writeTable prints the header, the columns and every row.
func writeTable(w io.Writer, r *Result, busbw bool) {
	writeHeader(w, r)
	ranks := 0
	if len(r.Rows) > 0 {
		ranks = len(r.Rows[0].Ranks)
	}
	writeColumns(w, r.Test, busbw, ranks)
	for _, row := range r.Rows {
		writeRow(w, r.Test, busbw, row)
	}
}

// writeJSON writes r to path (indented, so that diffs of saved runs read).
func writeJSON(path string, r *Result) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// readJSON reads a Result written by writeJSON.
func readJSON(path string) (*Result, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Result
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: not an rdmabench JSON file: %w", path, err)
	}
	if r.Tool != "rdmabench" || r.Test == "" {
		return nil, fmt.Errorf("%s: not an rdmabench JSON file (no tool/test fields)", path)
	}
	return &r, nil
}
