package collectives_test

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/collectives"
	"github.com/rdmago/rdmago/collectives/coltest"
)

// TestParseTuning: every tunable reads back what ParseTuning set, reaches
// the Engine's model (or Options), and its stated default is the value
// the model takes when nothing is set.
func TestParseTuning(t *testing.T) {
	t.Parallel()
	def := collectives.DefaultModel()
	for _, tu := range collectives.Tunables() {
		t.Run(tu.Name, func(t *testing.T) {
			// The default, where it is a fixed value, is DefaultModel's
			// (or Options' for inline_bytes and segment_bytes).
			if got, ok := tu.Value(collectives.Options{Model: &def}); ok {
				require.Equal(t, tu.Default(), got)
			} else {
				require.Contains(t, []string{"inline_bytes", "segment_bytes", "intra_alpha", "intra_beta", "onesided_alpha", "crowd"}, tu.Name)
			}
			val := map[bool]string{true: "3K", false: "7us"}[strings.HasSuffix(tu.Name, "_bytes") || strings.HasPrefix(tu.Name, "shm_")]
			if strings.Contains(tu.Name, "beta") || strings.Contains(tu.Name, "gamma") || tu.Name == "post_overlap" || tu.Name == "crowd" {
				val = "0.375"
			}
			var o collectives.Options
			require.NoError(t, collectives.ParseTuning(" "+tu.Name+" = "+val+" ,", &o))
			got, ok := tu.Value(o)
			require.True(t, ok)
			want := map[string]string{"3K": "3K", "7us": "7µs", "0.375": "0.375"}[val]
			require.Equal(t, want, got)
			// Every other tunable is left unset.
			for _, other := range collectives.Tunables() {
				if other.Name != tu.Name {
					_, set := other.Value(o)
					require.False(t, set, other.Name)
				}
			}
			e, err := collectives.New(coltest.NewWorld(1, coltest.Options{}).Group(0), o)
			require.NoError(t, err)
			defer e.Close()
			m := e.Model()
			resolved := collectives.Options{Model: &m, InlineBytes: o.InlineBytes, SegmentBytes: o.SegmentBytes}
			got, _ = tu.Value(resolved)
			require.Equal(t, want, got, "the Engine's model")
		})
	}
}

func TestParseTuningErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{"shm_small_bytes=lots", `tuning shm_small_bytes="lots": want a size in bytes`},
		{"shm_small_bytes=0", `shm_small_bytes="0": want a nonzero size`},
		{"inline_bytes=-1", `inline_bytes="-1": want a positive size`},
		{"inline_bytes=2M", `inline_bytes="2M": want at most 1M`},
		{"segment_bytes=max", `segment_bytes="max": want a positive size`},
		{"alpha=3", `alpha="3": want a positive duration`},
		{"crowded_keep_cpu=0", `crowded_keep_cpu="0": want a positive duration (4us, 800ns) or "off"`},
		{"crowded_keep_cpu=none", `crowded_keep_cpu="none": want a positive duration`},
		{"beta=-1e-9", `beta="-1e-9": want a positive number`},
		{"gamma=NaN", `gamma="NaN": want a positive number`},
		{"post_overlap=+Inf", `post_overlap="+Inf": want a positive number`},
		{"shm_read_max", `tuning "shm_read_max" is not name=value`},
		{"hier_big=1K", `unknown tunable "hier_big" (have alpha, beta,`},
		{"shm_small_bytes=99999999999999999999", `shm_small_bytes="99999999999999999999"`},
	} {
		var o collectives.Options
		err := collectives.ParseTuning(c.in, &o)
		require.ErrorIs(t, err, collectives.ErrInvalidArgument, c.in)
		require.ErrorContains(t, err, c.want, c.in)
	}
	// Sizes: units, "max" and negative sizes ("none").
	var o collectives.Options
	require.NoError(t, collectives.ParseTuning("shm_small_bytes=-1,shm_read_min=65536,shm_read_max=2MiB,shm_split_min=1kb,shm_allreduce_max=max,hier_big_bytes=1G", &o))
	require.Equal(t, -1, o.Model.ShmSmallBytes)
	require.Equal(t, 64<<10, o.Model.ShmReadMin)
	require.Equal(t, 2<<20, o.Model.ShmReadMax)
	require.Equal(t, 1<<10, o.Model.ShmSplitMin)
	require.Equal(t, 1<<30, o.Model.HierBigBytes)
	v, _ := collectives.Tunables()[0].Value(collectives.Options{})
	require.Empty(t, v)
	// "off" turns keeping the CPU off (a negative duration), reads back
	// as "off", and survives the Engine's defaults.
	o = collectives.Options{}
	require.NoError(t, collectives.ParseTuning("crowded_keep_cpu=off", &o))
	require.Negative(t, o.Model.ShmKeepCPU)
	for _, tu := range collectives.Tunables() {
		if tu.Name == "crowded_keep_cpu" {
			v, set := tu.Value(o)
			require.True(t, set)
			require.Equal(t, "off", v)
		}
	}
	e, err := collectives.New(coltest.NewWorld(1, coltest.Options{}).Group(0), o)
	require.NoError(t, err)
	defer e.Close()
	require.Negative(t, e.Model().ShmKeepCPU)
}

// TestMergeTuning: a tunable set in dst stays, one left at its default
// comes from src, and neither Options' Model is written.
func TestMergeTuning(t *testing.T) {
	t.Parallel()
	dm := &collectives.Model{ShmSmallBytes: 1 << 10}
	sm := &collectives.Model{ShmSmallBytes: 2 << 10, ShmReadMax: 3 << 10}
	got := collectives.MergeTuning(collectives.Options{Model: dm}, collectives.Options{Model: sm, SegmentBytes: 4 << 10})
	require.Equal(t, 1<<10, got.Model.ShmSmallBytes)
	require.Equal(t, 3<<10, got.Model.ShmReadMax)
	require.Equal(t, 4<<10, got.SegmentBytes)
	require.Equal(t, collectives.Model{ShmSmallBytes: 1 << 10}, *dm)
	require.Equal(t, collectives.Model{ShmSmallBytes: 2 << 10, ShmReadMax: 3 << 10}, *sm)
}

// TestTunablesDocumented: docs/collectives.md lists every tunable with its
// default.
func TestTunablesDocumented(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/collectives.md")
	require.NoError(t, err)
	for _, tu := range collectives.Tunables() {
		row := "| `" + tu.Name + "` | " + tu.Default() + " |"
		require.True(t, strings.Contains(string(doc), row), "docs/collectives.md's tunables table has no row %q", row)
	}
}

// TestAlgorithmsDocumented: docs/tuning.md's table of algorithms lists,
// for every collective it has a row for, exactly what Algorithms returns.
func TestAlgorithmsDocumented(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/tuning.md")
	require.NoError(t, err)
	rows := 0
	for _, line := range strings.Split(string(doc), "\n") {
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		if len(cells) != 2 {
			continue
		}
		for _, name := range strings.Split(cells[0], ", ") {
			c, err := collectives.ParseCollective(name)
			if err != nil {
				continue
			}
			var want []string
			for _, a := range collectives.Algorithms(c) {
				want = append(want, a.String())
			}
			require.Equal(t, strings.Join(want, ", "), cells[1], "docs/tuning.md's algorithms of %s", name)
			rows++
		}
	}
	require.GreaterOrEqual(t, rows, 9, "docs/tuning.md's table of algorithms has rows for %d collectives", rows)
}
