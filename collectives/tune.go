package collectives

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Tunable is one named parameter of the cost model (a Model field) or of
// Options (InlineBytes, SegmentBytes) that ParseTuning, and comm's
// RDMAGO_TUNE variable, can set by name.
type Tunable struct {
	Name string // the key, "shm_small_bytes"
	Doc  string // what it means
	kind tuneKind
	ptr  func(o *Options, set bool) any // *int, *float64 or *time.Duration; nil when unset and !set
	def  string
}

type tuneKind uint8

const (
	tuneBytes tuneKind = iota
	tuneDuration
	tuneFloat
	tunePositiveBytes // InlineBytes, SegmentBytes: no "none"
	tuneDurationOff   // a duration, or "off" (stored as -1)
)

// modelField makes a Tunable's accessor for a field of Options.Model,
// which setting copies (so that Options sharing one *Model stay apart).
func modelField[T any](f func(m *Model) *T) func(o *Options, set bool) any {
	return func(o *Options, set bool) any {
		switch {
		case set && o.Model == nil:
			o.Model = &Model{}
		case set:
			m := *o.Model
			o.Model = &m
		case o.Model == nil:
			return nil
		}
		return f(o.Model)
	}
}

func bytesDef(n int) string { return formatBytes(n) }

var tunables = []Tunable{
	{"alpha", "per-message latency of the slowest link; the group's LinkInfo replaces the default", tuneDuration,
		modelField(func(m *Model) *time.Duration { return &m.Alpha }), defModel.Alpha.String()},
	{"beta", "seconds per byte on the slowest link (1.25e-10 is 8 GB/s); the group's LinkInfo replaces the default", tuneFloat,
		modelField(func(m *Model) *float64 { return &m.Beta }), fmt.Sprint(defModel.Beta)},
	{"gamma", "seconds per byte reduced", tuneFloat,
		modelField(func(m *Model) *float64 { return &m.Gamma }), fmt.Sprint(defModel.Gamma)},
	{"copy_beta", "seconds per byte a rank copies in its own memory (the hierarchical alltoall's packing)", tuneFloat,
		modelField(func(m *Model) *float64 { return &m.CopyBeta }), fmt.Sprint(defModel.CopyBeta)},
	{"intra_alpha", "per-message latency inside a host (hierarchical algorithms)", tuneDuration,
		modelField(func(m *Model) *time.Duration { return &m.IntraAlpha }), "the best same-host link, else alpha"},
	{"intra_beta", "seconds per byte inside a host (hierarchical algorithms)", tuneFloat,
		modelField(func(m *Model) *float64 { return &m.IntraBeta }), "the best same-host link, else beta"},
	{"onesided_alpha", "per-message cost of a one-sided write with notification (the one-sided ring)", tuneDuration,
		modelField(func(m *Model) *time.Duration { return &m.OneSidedAlpha }), "alpha"},
	{"post_overlap", "cost of each further message of a batch posted at once, as a fraction of alpha (linear allgather and alltoall, pairwise reduce_scatter)", tuneFloat,
		modelField(func(m *Model) *float64 { return &m.PostOverlap }), fmt.Sprint(defModel.PostOverlap)},
	{"crowd", "ranks per CPU on the job's most crowded host: in a group spanning hosts, the flat algorithms pay their messages' latency this many times over, the hierarchical ones only their steps inside a host", tuneFloat,
		modelField(func(m *Model) *float64 { return &m.Crowd }), "the group's Crowding, else 1"},
	{"shm_small_bytes", "every shared-memory collective up to this size", tuneBytes,
		modelField(func(m *Model) *int { return &m.ShmSmallBytes }), bytesDef(defModel.ShmSmallBytes)},
	{"shm_allreduce_max", "the shared-memory allreduce up to this size", tuneBytes,
		modelField(func(m *Model) *int { return &m.ShmAllreduceMax }), bytesDef(defModel.ShmAllreduceMax)},
	{"shm_reduce_max", "the shared-memory reduce up to this size", tuneBytes,
		modelField(func(m *Model) *int { return &m.ShmReduceMax }), bytesDef(defModel.ShmReduceMax)},
	{"shm_reduce_fold_bytes", "a shared-memory reduce has every rank fold a block and the root gather them above this size (else the root folds every chunk)", tuneBytes,
		modelField(func(m *Model) *int { return &m.ShmReduceFoldBytes }), bytesDef(defModel.ShmReduceFoldBytes)},
	{"shm_reduce_read_min", "a shared-memory reduce whose root folds in place reads the other ranks' buffers above this size (where the region can and ranks have CPUs of their own)", tuneBytes,
		modelField(func(m *Model) *int { return &m.ShmReduceReadMin }), bytesDef(defModel.ShmReduceReadMin)},
	{"shm_reduce_read_max", "a shared-memory reduce reads the other ranks' buffers up to this size (from shm_reduce_read_min)", tuneBytes,
		modelField(func(m *Model) *int { return &m.ShmReduceReadMax }), bytesDef(defModel.ShmReduceReadMax)},
	{"shm_allgather_max", "the shared-memory allgather up to this size (of the result)", tuneBytes,
		modelField(func(m *Model) *int { return &m.ShmAllgatherMax }), bytesDef(defModel.ShmAllgatherMax)},
	{"shm_reduce_scatter_max", "the shared-memory reduce_scatter up to this size (of one rank's send buffer)", tuneBytes,
		modelField(func(m *Model) *int { return &m.ShmReduceScatterMax }), bytesDef(defModel.ShmReduceScatterMax)},
	{"shm_alltoall_max", "the shared-memory alltoall up to this size (of one rank's send buffer)", tuneBytes,
		modelField(func(m *Model) *int { return &m.ShmAlltoallMax }), bytesDef(defModel.ShmAlltoallMax)},
	{"shm_allgather2_max", "the shared-memory allgather of two ranks that do not share a CPU up to this size (of the result)", tuneBytes,
		modelField(func(m *Model) *int { return &m.ShmAllgather2Max }), bytesDef(defModel.ShmAllgather2Max)},
	{"shm_alltoall2_max", "the shared-memory alltoall of two ranks that do not share a CPU up to this size (of one rank's send buffer)", tuneBytes,
		modelField(func(m *Model) *int { return &m.ShmAlltoall2Max }), bytesDef(defModel.ShmAlltoall2Max)},
	{"shm_alltoall_block_max", "the shared-memory alltoall of more than two ranks up to this size of a block (one send buffer over the rank count)", tuneBytes,
		modelField(func(m *Model) *int { return &m.ShmAlltoallBlockMax }), bytesDef(defModel.ShmAlltoallBlockMax)},
	{"shm_read_block_min", "a shared-memory allgather or alltoall reads each block straight out of its owner's buffer above this block size (where the region can)", tuneBytes,
		modelField(func(m *Model) *int { return &m.ShmReadBlockMin }), bytesDef(defModel.ShmReadBlockMin)},
	{"shm_bcast2_max", "the two-rank shared-memory bcast up to this size", tuneBytes,
		modelField(func(m *Model) *int { return &m.ShmBcast2Max }), bytesDef(defModel.ShmBcast2Max)},
	{"shm_bcast_max", "the shared-memory bcast of more than two ranks up to this size", tuneBytes,
		modelField(func(m *Model) *int { return &m.ShmBcastMax }), bytesDef(defModel.ShmBcastMax)},
	{"shm_read_min", "a shared-memory bcast of more than two ranks reads the root's buffer above this size", tuneBytes,
		modelField(func(m *Model) *int { return &m.ShmReadMin }), bytesDef(defModel.ShmReadMin)},
	{"shm_read_max", "a shared-memory bcast of more than two ranks reads the root's buffer up to this size", tuneBytes,
		modelField(func(m *Model) *int { return &m.ShmReadMax }), bytesDef(defModel.ShmReadMax)},
	{"shm_split_min", "a two-rank shared-memory bcast splits the copy between both ranks' kernel copies above this size (where the region can)", tuneBytes,
		modelField(func(m *Model) *int { return &m.ShmSplitMin }), bytesDef(defModel.ShmSplitMin)},
	{"shm_split_max", "a two-rank shared-memory bcast splits the copy up to this size", tuneBytes,
		modelField(func(m *Model) *int { return &m.ShmSplitMax }), bytesDef(defModel.ShmSplitMax)},
	{"shm_split_gap_min", "a two-rank shared-memory bcast pipelines through the slots instead above this size", tuneBytes,
		modelField(func(m *Model) *int { return &m.ShmSplitGapMin }), bytesDef(defModel.ShmSplitGapMin)},
	{"shm_split_gap_max", "a two-rank shared-memory bcast pipelines through the slots up to this size, from shm_split_gap_min", tuneBytes,
		modelField(func(m *Model) *int { return &m.ShmSplitGapMax }), bytesDef(defModel.ShmSplitGapMax)},
	{"shm_fold_bytes", "a shared-memory allreduce of more than two ranks folds blocks and gathers them above this size", tuneBytes,
		modelField(func(m *Model) *int { return &m.ShmFoldBytes }), bytesDef(defModel.ShmFoldBytes)},
	{"shm_fold_bytes2", "a two-rank shared-memory allreduce folds blocks and gathers them above this size", tuneBytes,
		modelField(func(m *Model) *int { return &m.ShmFoldBytes2 }), bytesDef(defModel.ShmFoldBytes2)},
	{"shm_pipe_bytes", "a shared-memory allreduce that reads every chunk, and a reduce whose root folds every chunk, move in pieces above this size", tuneBytes,
		modelField(func(m *Model) *int { return &m.ShmPipeBytes }), bytesDef(defModel.ShmPipeBytes)},
	{"shm_piece_min", "the smallest piece of a pipelined shared-memory bcast or allreduce (an eighth of the vector, at most a slot)", tuneBytes,
		modelField(func(m *Model) *int { return &m.ShmPieceMin }), bytesDef(defModel.ShmPieceMin)},
	{"shm_prefetch_max", "a shared-memory reader prefetches the lines of a chunk it waits for, past the slot's first line, up to this many bytes", tuneBytes,
		modelField(func(m *Model) *int { return &m.ShmPrefetchMax }), bytesDef(defModel.ShmPrefetchMax)},
	{"crowded_keep_cpu", "where ranks outnumber CPUs, a shared-memory waiter polls without yielding for at most this long while the rank it waits for looks about to publish from another CPU (\"off\": never)", tuneDurationOff,
		modelField(func(m *Model) *time.Duration { return &m.ShmKeepCPU }), defModel.ShmKeepCPU.String()},
	{"crowded_live_window", "a rank counts as running, for crowded_keep_cpu, if its wait looked within this long", tuneDuration,
		modelField(func(m *Model) *time.Duration { return &m.ShmLiveWindow }), defModel.ShmLiveWindow.String()},
	{"hier_big_bytes", "hierarchical algorithms use their bandwidth forms (ring reduce-scatter and gather inside a host, scatter-allgather bcast) above this size, binomial trees below", tuneBytes,
		modelField(func(m *Model) *int { return &m.HierBigBytes }), bytesDef(defModel.HierBigBytes)},
	{"hier_big_crowded_bytes", "hier_big_bytes where a host's ranks outnumber its CPUs", tuneBytes,
		modelField(func(m *Model) *int { return &m.HierBigCrowdedBytes }), bytesDef(defModel.HierBigCrowdedBytes)},
	{"ring_piece_bytes", "the ring allreduce moves each block in pieces of at most this size, reducing and forwarding each while the next arrive", tuneBytes,
		modelField(func(m *Model) *int { return &m.RingPieceBytes }), bytesDef(defModel.RingPieceBytes)},
	{"pair_exchange_bytes", "a two-rank allreduce over messages (two ranks, or two hosts' leaders) runs recursive doubling, and a two-rank reduce the binomial tree, up to this size rather than the ring or Rabenseifner", tuneBytes,
		modelField(func(m *Model) *int { return &m.PairExchangeBytes }), bytesDef(defModel.PairExchangeBytes)},
	{"inline_bytes", "the largest payload sent in its header's message (Options.InlineBytes, at most 1M; unset, more to peers whose eager messages hold more); the cost model counts the linear allgather and alltoall's larger blocks as two messages", tunePositiveBytes,
		func(o *Options, _ bool) any { return &o.InlineBytes }, bytesDef((&Options{}).inline())},
	{"segment_bytes", "the pipelining unit of the chain bcast and the one-sided ring (Options.SegmentBytes)", tunePositiveBytes,
		func(o *Options, _ bool) any { return &o.SegmentBytes }, bytesDef((&Options{}).segment())},
}

// Tunables lists the parameters ParseTuning knows, in a fixed order.
func Tunables() []Tunable { return append([]Tunable(nil), tunables...) }

// Default is the parameter's default, as ParseTuning would read it (or a
// description where the group decides it).
func (t Tunable) Default() string { return t.def }

// Value reports the parameter's setting in o, and false when o leaves it
// at its default (zero).
func (t Tunable) Value(o Options) (string, bool) {
	switch p := t.ptr(&o, false).(type) {
	case *int:
		return formatBytes(*p), *p != 0
	case *float64:
		return fmt.Sprint(*p), *p != 0
	case *time.Duration:
		if t.kind == tuneDurationOff && *p < 0 {
			return "off", true
		}
		return p.String(), *p != 0
	}
	return "", false
}

// Set parses v and sets the parameter in o (a Model field in a copy of
// o.Model, so that other Options sharing it are not changed).
func (t Tunable) Set(o *Options, v string) error {
	bad := func(want string) error {
		return fmt.Errorf("%w: tuning %s=%q: want %s", ErrInvalidArgument, t.Name, v, want)
	}
	v = strings.TrimSpace(v)
	switch t.kind {
	case tuneBytes, tunePositiveBytes:
		n, ok := parseBytes(v)
		switch {
		case !ok && t.kind == tuneBytes:
			return bad(`a size in bytes (65536, 64K, 1M, 1G; "max" for every size, negative for none)`)
		case !ok || t.kind == tunePositiveBytes && (n <= 0 || n == math.MaxInt):
			return bad("a positive size in bytes (65536, 64K, 1M)")
		case n == 0:
			return bad(`a nonzero size (0 is the default; a negative size means none, "max" every size)`)
		case t.Name == "inline_bytes" && n > 1<<20:
			return bad("at most 1M")
		}
		*t.ptr(o, true).(*int) = n
	case tuneDuration, tuneDurationOff:
		d, err := time.ParseDuration(v)
		switch {
		case t.kind == tuneDurationOff && v == "off":
			d = -1
		case t.kind == tuneDurationOff && (err != nil || d <= 0):
			return bad(`a positive duration (4us, 800ns) or "off"`)
		case err != nil || d <= 0:
			return bad("a positive duration (3us, 800ns)")
		}
		*t.ptr(o, true).(*time.Duration) = d
	case tuneFloat:
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || !(f > 0) || math.IsInf(f, 1) {
			return bad("a positive number (1.25e-10, 0.25)")
		}
		*t.ptr(o, true).(*float64) = f
	}
	return nil
}

// ParseTuning parses "shm_small_bytes=32K,alpha=2us" (the format of comm's
// RDMAGO_TUNE variable) and sets the named parameters in o (see
// Tunables). An unknown name or a bad value is an ErrInvalidArgument
// naming it.
func ParseTuning(s string, o *Options) error {
	return eachPair(s, "tuning", "name=value", func(k, v string) error {
		t, ok := tunableNamed(strings.TrimSpace(k))
		if !ok {
			names := make([]string, len(tunables))
			for i, t := range tunables {
				names[i] = t.Name
			}
			return fmt.Errorf("%w: unknown tunable %q (have %s)", ErrInvalidArgument, strings.TrimSpace(k), strings.Join(names, ", "))
		}
		return t.Set(o, v)
	})
}

// MergeTuning returns dst with every tunable that dst leaves at its
// default taken from src: settings made in dst win.
func MergeTuning(dst, src Options) Options {
	for _, t := range tunables {
		_, have := t.Value(src)
		if _, set := t.Value(dst); !have || set {
			continue
		}
		switch p := t.ptr(&src, false).(type) {
		case *int:
			*t.ptr(&dst, true).(*int) = *p
		case *float64:
			*t.ptr(&dst, true).(*float64) = *p
		case *time.Duration:
			*t.ptr(&dst, true).(*time.Duration) = *p
		}
	}
	return dst
}

func tunableNamed(name string) (Tunable, bool) {
	for _, t := range tunables {
		if t.Name == strings.ToLower(name) {
			return t, true
		}
	}
	return Tunable{}, false
}

// parseBytes reads "65536", "64K", "64KiB", "1M", "2G", "-1" or "max"
// (K, M, G are powers of 1024).
func parseBytes(s string) (int, bool) {
	if strings.EqualFold(s, "max") {
		return math.MaxInt, true
	}
	mult := 1
	u := strings.ToUpper(s)
	u = strings.TrimSuffix(strings.TrimSuffix(u, "IB"), "B")
	switch {
	case strings.HasSuffix(u, "K"):
		mult = 1 << 10
	case strings.HasSuffix(u, "M"):
		mult = 1 << 20
	case strings.HasSuffix(u, "G"):
		mult = 1 << 30
	}
	if mult > 1 {
		u = u[:len(u)-1]
	}
	n, err := strconv.ParseInt(u, 10, 64)
	if err != nil || n > math.MaxInt/int64(mult) || n < math.MinInt/int64(mult) {
		return 0, false
	}
	return int(n) * mult, true
}

// formatBytes is parseBytes's inverse, in the largest exact unit.
func formatBytes(n int) string {
	switch {
	case n == math.MaxInt:
		return "max"
	case n != 0 && n%(1<<30) == 0:
		return strconv.Itoa(n>>30) + "G"
	case n != 0 && n%(1<<20) == 0:
		return strconv.Itoa(n>>20) + "M"
	case n != 0 && n%(1<<10) == 0:
		return strconv.Itoa(n>>10) + "K"
	}
	return strconv.Itoa(n)
}
