package reduce

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFloat16RoundTripExhaustive(t *testing.T) {
	for h := 0; h < 1<<16; h++ {
		x := Float16(h)
		f := x.Float32()
		if math.IsNaN(float64(f)) {
			require.True(t, math.IsNaN(float64(Float16From(f).Float32())), "NaN %#04x", h)
			continue
		}
		require.Equal(t, x, Float16From(f), "round trip of %#04x (%v)", h, f)
	}
}

func TestBFloat16RoundTripExhaustive(t *testing.T) {
	for h := 0; h < 1<<16; h++ {
		x := BFloat16(h)
		f := x.Float32()
		if math.IsNaN(float64(f)) {
			require.True(t, math.IsNaN(float64(BFloat16From(f).Float32())), "NaN %#04x", h)
			continue
		}
		require.Equal(t, x, BFloat16From(f), "round trip of %#04x", h)
	}
}

// TestHalfRoundingMidpoints checks round-to-nearest-even on every pair of
// adjacent positive finite values: the exact midpoint goes to the one with
// an even mantissa, and anything a hair off the midpoint to the nearer one.
func TestHalfRoundingMidpoints(t *testing.T) {
	type conv struct {
		name   string
		wide   func(uint16) float32
		narrow func(float32) uint16
		maxFin uint16
	}
	for _, c := range []conv{
		{"float16", func(v uint16) float32 { return Float16(v).Float32() }, func(f float32) uint16 { return uint16(Float16From(f)) }, 0x7bff},
		{"bfloat16", func(v uint16) float32 { return BFloat16(v).Float32() }, func(f float32) uint16 { return uint16(BFloat16From(f)) }, 0x7f7f},
	} {
		t.Run(c.name, func(t *testing.T) {
			for v := uint16(0); v < c.maxFin; v++ {
				a, b := c.wide(v), c.wide(v+1)
				mid := float32((float64(a) + float64(b)) / 2)
				require.Equal(t, float64(mid), (float64(a)+float64(b))/2, "midpoint exact in float32")
				even := v
				if v&1 == 1 {
					even = v + 1
				}
				require.Equal(t, even, c.narrow(mid), "midpoint of %#04x and %#04x", v, v+1)
				require.Equal(t, v, c.narrow(math.Nextafter32(mid, 0)), "just below midpoint of %#04x", v)
				require.Equal(t, v+1, c.narrow(math.Nextafter32(mid, float32(math.Inf(1)))), "just above midpoint of %#04x", v)
				// Negative values mirror.
				require.Equal(t, even|0x8000, c.narrow(-mid))
			}
			// Overflow: beyond the midpoint between max finite and the next
			// (virtual) step rounds to infinity.
			maxf := float64(c.wide(c.maxFin))
			step := maxf - float64(c.wide(c.maxFin-1))
			require.Equal(t, c.maxFin, c.narrow(float32(maxf+step/2-step/8)))
			require.True(t, math.IsInf(float64(c.wide(c.narrow(float32(maxf+step/2)))), 1))
			require.True(t, math.IsInf(float64(c.wide(c.narrow(float32(math.Inf(-1))))), -1))
		})
	}
}

// TestFloat16FromRandom compares with a float64 reference: the nearest
// representable value (ties to even) over random float32 inputs.
func TestFloat16FromRandom(t *testing.T) {
	var vals []float64 // all non-negative finite float16 values, ascending
	for h := uint16(0); h <= 0x7bff; h++ {
		vals = append(vals, float64(Float16(h).Float32()))
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 200000; i++ {
		f := math.Float32frombits(rng.Uint32())
		if math.IsNaN(float64(f)) || math.Abs(float64(f)) >= 65520 {
			continue
		}
		x := math.Abs(float64(f))
		// binary search for the nearest
		lo, hi := 0, len(vals)-1
		for lo < hi {
			mid := (lo + hi + 1) / 2
			if vals[mid] <= x {
				lo = mid
			} else {
				hi = mid - 1
			}
		}
		want := lo
		if lo+1 < len(vals) {
			d0, d1 := x-vals[lo], vals[lo+1]-x
			if d1 < d0 || (d1 == d0 && lo%2 == 1) {
				want = lo + 1
			}
		}
		got := Float16From(f)
		require.Equal(t, uint16(want), uint16(got)&0x7fff, "Float16From(%g)", f)
		if math.Signbit(float64(f)) {
			require.Equal(t, uint16(0x8000), uint16(got)&0x8000)
		}
	}
}

func TestDTypeOf(t *testing.T) {
	type myFloat float32
	type myInt int
	require.Equal(t, Float32, DTypeOf[float32]())
	require.Equal(t, Float32, DTypeOf[myFloat]())
	require.Equal(t, Int64, DTypeOf[myInt]())
	require.Equal(t, Uint64, DTypeOf[uintptr]())
	require.Equal(t, BF16, DTypeOf[BFloat16]())
	require.Equal(t, F16, DTypeOf[Float16]())
	require.Equal(t, Uint16, DTypeOf[uint16]())
	require.Equal(t, Uint8, DTypeOf[byte]())
	type myFloat64 float64
	require.Equal(t, Float64, DTypeOf[float64]())
	require.Equal(t, Float64, DTypeOf[myFloat64]())
	require.Equal(t, Int32, DTypeOf[int32]())
	require.Equal(t, Int64, DTypeOf[int64]())
	require.Equal(t, Int8, DTypeOf[int8]())
	require.Equal(t, Uint32, DTypeOf[uint32]())
	for d := Int8; d < numDTypes; d++ {
		require.NotZero(t, d.Size(), d.String())
	}
}

func TestBytesView(t *testing.T) {
	x := []int32{1, -2, 3}
	b := Bytes(x)
	require.Len(t, b, 12)
	y := View[int32](b)
	y[1] = 7
	require.Equal(t, int32(7), x[1])
	require.Nil(t, Bytes([]int32{}))
	require.Nil(t, View[int64](make([]byte, 7)))
}
