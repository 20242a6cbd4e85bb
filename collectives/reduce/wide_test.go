package reduce

import (
	"math"
	"testing"
)

// TestFloatSumsMatchPlainLoop: the float32 and float64 Sum kernels (the
// AVX-512 loop where the CPU has it, gonum's assembly for the rest) give
// the bits of the plain loop at every length from 0 to 300 and at a few
// larger ones, at odd starting offsets, with infinities, NaNs, signed
// zeros and subnormals among the values; and Resolve picks them.
func TestFloatSumsMatchPlainLoop(t *testing.T) {
	t.Logf("wide kernels: %v", useWide)
	special32 := []float32{0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)),
		float32(math.NaN()), math.SmallestNonzeroFloat32, math.MaxFloat32, -1.5, 3.25e-20}
	special64 := []float64{0, math.Copysign(0, -1), math.Inf(1), math.Inf(-1), math.NaN(),
		math.SmallestNonzeroFloat64, math.MaxFloat64, -1.5, 3.25e-300}
	k32, err := Sum.Resolve(Float32)
	if err != nil {
		t.Fatal(err)
	}
	k64, err := Sum.Resolve(Float64)
	if err != nil {
		t.Fatal(err)
	}
	lengths := []int{}
	for n := 0; n <= 300; n++ {
		lengths = append(lengths, n)
	}
	lengths = append(lengths, 1023, 1024, 4097, 65536+31)
	for _, n := range lengths {
		for _, off := range []int{0, 1, 3} {
			a32, b32 := make([]float32, n+off), make([]float32, n+off)
			a64, b64 := make([]float64, n+off), make([]float64, n+off)
			for i := range a32 {
				a32[i] = float32(i%97)*0.37 - 11
				b32[i] = float32(i%13) * 1e-3
				a64[i] = float64(i%97)*0.37 - 11
				b64[i] = float64(i%13) * 1e-3
				if i%29 == 5 {
					a32[i], a64[i] = special32[i%len(special32)], special64[i%len(special64)]
				}
				if i%31 == 7 {
					b32[i], b64[i] = special32[(i/31)%len(special32)], special64[(i/31)%len(special64)]
				}
			}
			w32, w64 := append([]float32(nil), a32...), append([]float64(nil), a64...)
			SumPlain(w32[off:], b32[off:])
			SumPlain(w64[off:], b64[off:])
			k32.Combine(Bytes(a32[off:]), Bytes(b32[off:]))
			k64.Combine(Bytes(a64[off:]), Bytes(b64[off:]))
			for i := range a32 {
				if math.Float32bits(a32[i]) != math.Float32bits(w32[i]) {
					t.Fatalf("float32 sum of %d at +%d: element %d is %v (%#x), the plain loop's %v", n, off, i, a32[i], math.Float32bits(a32[i]), w32[i])
				}
				if math.Float64bits(a64[i]) != math.Float64bits(w64[i]) {
					t.Fatalf("float64 sum of %d at +%d: element %d is %v, the plain loop's %v", n, off, i, a64[i], w64[i])
				}
			}
		}
	}
}

// TestIntSumsMatchPlainLoop: the 32- and 64-bit integer Sum kernels (the
// AVX-512 loop where the CPU has it, the unrolled loop for the rest) give
// the plain loop's values, wrapping on overflow, at every length from 0
// to 300 and a few larger ones, at odd starting offsets.
func TestIntSumsMatchPlainLoop(t *testing.T) {
	lengths := []int{}
	for n := 0; n <= 300; n++ {
		lengths = append(lengths, n)
	}
	lengths = append(lengths, 1023, 4097, 65536+63)
	checkIntSums[int32](t, Int32, lengths, func(i int) int32 { return int32(i*2654435761 + 0x7ffffff0) })
	checkIntSums[uint32](t, Uint32, lengths, func(i int) uint32 { return uint32(i*2246822519 + 0xfffffff0) })
	checkIntSums[int64](t, Int64, lengths, func(i int) int64 { return int64(i)*0x3fffffffffffffd + math.MaxInt64 - 5 })
	checkIntSums[uint64](t, Uint64, lengths, func(i int) uint64 { return uint64(i)*0x9e3779b97f4a7c15 + math.MaxUint64 - 3 })
}

func checkIntSums[T int32 | uint32 | int64 | uint64](t *testing.T, dt DType, lengths []int, val func(i int) T) {
	t.Helper()
	k, err := Sum.Resolve(dt)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range lengths {
		for _, off := range []int{0, 1, 3} {
			a, b := make([]T, n+off), make([]T, n+off)
			for i := range a {
				a[i], b[i] = val(i), val(3*i+7)
			}
			want := append([]T(nil), a...)
			SumPlain(want[off:], b[off:])
			k.Combine(Bytes(a[off:]), Bytes(b[off:]))
			for i := range a {
				if a[i] != want[i] {
					t.Fatalf("%v sum of %d at +%d: element %d is %v, the plain loop's %v", dt, n, off, i, a[i], want[i])
				}
			}
		}
	}
}
