package reduce

import (
	"sync"

	"github.com/klauspost/cpuid/v2"
	"gonum.org/v1/gonum/blas/gonum"
	"gonum.org/v1/gonum/floats"
)

// Kernel choice. Go has no SIMD intrinsics, so the fast paths are: our
// AVX-512 loops for float32/float64 and 32/64-bit integer sums where the
// CPU has them (useWide), else gonum's SSE assembly for the float sums
// (axpy with α = 1, exact since 1·x == x), word-parallel bitwise ops
// (eight bytes per step whatever the element width), and 8-way unrolled
// loops elsewhere, which let the CPU
// overlap independent operations. BenchmarkKernels measures each against
// the plain loop; useAsm records whether the machine has the SSE2 baseline
// gonum's amd64 kernels need (always true on amd64; false elsewhere, where
// gonum falls back to Go loops we can match ourselves).
var useAsm = cpuid.CPU.Supports(cpuid.SSE2)

// Features describes what kernel selection saw on this CPU (for reports).
func Features() string {
	s := cpuid.CPU.BrandName
	if useAsm {
		s += " [gonum asm: sse2]"
	}
	if useWide {
		s += " [avx512 sums]"
	}
	if cpuid.CPU.Supports(cpuid.AVX2) {
		s += " [avx2]"
	}
	if cpuid.CPU.Supports(cpuid.F16C) {
		s += " [f16c]"
	}
	return s
}

func builtin(code OpCode, dt DType) func(inout, in []byte) {
	switch code {
	case OpBAnd, OpBOr, OpBXor:
		return func(inout, in []byte) { bitwise(code, inout, in) }
	}
	switch dt {
	case Int8:
		return numeric[int8](code, dt)
	case Int16:
		return numeric[int16](code, dt)
	case Int32:
		return numeric[int32](code, dt)
	case Int64:
		return numeric[int64](code, dt)
	case Uint8:
		return numeric[uint8](code, dt)
	case Uint16:
		return numeric[uint16](code, dt)
	case Uint32:
		return numeric[uint32](code, dt)
	case Uint64:
		return numeric[uint64](code, dt)
	case Float32:
		return numeric[float32](code, dt)
	case Float64:
		return numeric[float64](code, dt)
	case BF16:
		if code == OpSum || code == OpAvg {
			return sumBF16
		}
		return half(code, func(v uint16) float32 { return BFloat16(v).Float32() }, func(f float32) uint16 { return uint16(BFloat16From(f)) })
	case F16:
		if code == OpSum || code == OpAvg {
			return sumF16
		}
		return half(code, func(v uint16) float32 { return Float16(v).Float32() }, func(f float32) uint16 { return uint16(Float16From(f)) })
	}
	return nil
}

func numeric[T number](code OpCode, dt DType) func(inout, in []byte) {
	var f func(a, b []T)
	switch code {
	case OpSum, OpAvg:
		switch {
		case dt == Float32 && useAsm:
			return func(inout, in []byte) {
				if a, b := View[float32](inout), View[float32](in); len(a) >= smallSum32 {
					SumFloat32Asm(a, b)
				} else {
					SumUnrolled(a, b)
				}
			}
		case dt == Float64 && useAsm:
			return func(inout, in []byte) {
				if a, b := View[float64](inout), View[float64](in); len(a) >= smallSum64 {
					SumFloat64Asm(a, b)
				} else {
					SumUnrolled(a, b)
				}
			}
		case (dt == Int32 || dt == Uint32) && useWide:
			return func(inout, in []byte) {
				sumWide(View[uint32](inout), View[uint32](in), 64, addI32Wide, SumUnrolled[uint32])
			}
		case (dt == Int64 || dt == Uint64) && useWide:
			return func(inout, in []byte) {
				sumWide(View[uint64](inout), View[uint64](in), 32, addI64Wide, SumUnrolled[uint64])
			}
		}
		f = SumUnrolled[T]
	case OpProd:
		f = prodPlain[T]
	case OpMin:
		f = MinUnrolled[T]
	case OpMax:
		f = maxUnrolled[T]
	case OpLAnd:
		f = func(a, b []T) {
			b = b[:len(a)]
			for i := range a {
				a[i] = boolTo[T](a[i] != 0 && b[i] != 0)
			}
		}
	case OpLOr:
		f = func(a, b []T) {
			b = b[:len(a)]
			for i := range a {
				a[i] = boolTo[T](a[i] != 0 || b[i] != 0)
			}
		}
	default:
		return nil
	}
	return func(inout, in []byte) { f(View[T](inout), View[T](in)) }
}

func boolTo[T number](b bool) T {
	if b {
		return 1
	}
	return 0
}

// smallSum32 and smallSum64 are the fewest floats a sum kernel hands to
// the assembly: below them the wide part is empty and gonum's routine is
// calls deep for a few additions, which a small call's fold (a 2-rank
// allreduce of 4-64 B) waits for, where Go's unrolled loop does the same
// additions (so the same bits) sooner: 3.6 ns against 7.3 for 8 float32s,
// 5.9 against 7.4 for 16, and from 24 the assembly wins (7.4 against 8.1;
// float64: 3.5 against 5.1 for 8, even at 16).
const (
	smallSum32 = 20
	smallSum64 = 16
)

// SumFloat32Asm is a += b: 64 elements at a time with AVX-512 where the
// CPU has it (useWide), the rest through gonum's saxpy assembly. Each
// element is one addition either way, so the bits are the same.
func SumFloat32Asm(a, b []float32) {
	sumWide(a, b, 64, addF32Wide, func(a, b []float32) { gonum.Implementation{}.Saxpy(len(a), 1, b, 1, a, 1) })
}

// SumFloat64Asm is SumFloat32Asm for float64: 32 elements at a time, the
// rest through gonum's assembly.
func SumFloat64Asm(a, b []float64) { sumWide(a, b, 32, addF64Wide, floats.Add) }

// sumWide adds b to a: the largest multiple of lanes elements with wide
// where the CPU has it (useWide), the others with rest.
func sumWide[T float32 | float64 | uint32 | uint64](a, b []T, lanes int, wide func(a, b *T, n int), rest func(a, b []T)) {
	b = b[:len(a)]
	if w := len(a) &^ (lanes - 1); useWide && w > 0 {
		wide(&a[0], &b[0], w)
		a, b = a[w:], b[w:]
	}
	if len(a) > 0 {
		rest(a, b)
	}
}

// SumPlain is the plain loop a[i] += b[i], the baseline of the benchmarks.
func SumPlain[T number](a, b []T) {
	for i := range a {
		a[i] += b[i]
	}
}

// SumUnrolled is a[i] += b[i], eight elements per iteration.
func SumUnrolled[T number](a, b []T) {
	b = b[:len(a)]
	i := 0
	for ; i+8 <= len(a); i += 8 {
		x, y := a[i:i+8:i+8], b[i:i+8:i+8]
		x[0] += y[0]
		x[1] += y[1]
		x[2] += y[2]
		x[3] += y[3]
		x[4] += y[4]
		x[5] += y[5]
		x[6] += y[6]
		x[7] += y[7]
	}
	for ; i < len(a); i++ {
		a[i] += b[i]
	}
}

// prodPlain: unrolling measured slower than the plain loop for products.
func prodPlain[T number](a, b []T) {
	b = b[:len(a)]
	for i := range a {
		a[i] *= b[i]
	}
}

// MinPlain is the plain loop a[i] = min(a[i], b[i]), the benchmarks' baseline.
func MinPlain[T number](a, b []T) {
	for i := range a {
		a[i] = min(a[i], b[i])
	}
}

// MinUnrolled is a[i] = min(a[i], b[i]), eight elements per iteration.
func MinUnrolled[T number](a, b []T) {
	b = b[:len(a)]
	i := 0
	for ; i+8 <= len(a); i += 8 {
		x, y := a[i:i+8:i+8], b[i:i+8:i+8]
		x[0] = min(x[0], y[0])
		x[1] = min(x[1], y[1])
		x[2] = min(x[2], y[2])
		x[3] = min(x[3], y[3])
		x[4] = min(x[4], y[4])
		x[5] = min(x[5], y[5])
		x[6] = min(x[6], y[6])
		x[7] = min(x[7], y[7])
	}
	for ; i < len(a); i++ {
		a[i] = min(a[i], b[i])
	}
}

func maxUnrolled[T number](a, b []T) {
	b = b[:len(a)]
	i := 0
	for ; i+8 <= len(a); i += 8 {
		x, y := a[i:i+8:i+8], b[i:i+8:i+8]
		x[0] = max(x[0], y[0])
		x[1] = max(x[1], y[1])
		x[2] = max(x[2], y[2])
		x[3] = max(x[3], y[3])
		x[4] = max(x[4], y[4])
		x[5] = max(x[5], y[5])
		x[6] = max(x[6], y[6])
		x[7] = max(x[7], y[7])
	}
	for ; i < len(a); i++ {
		a[i] = max(a[i], b[i])
	}
}

// bitwise applies And/Or/Xor word-parallel: the byte views are processed
// eight bytes at a time, which is element-width agnostic. Each op has its
// own loop (a function value per word would cost an indirect call each).
func bitwise(code OpCode, inout, in []byte) {
	in = in[:len(inout)]
	n := 0
	// Byte views of []T are aligned for T but not necessarily for uint64,
	// so the words go through View only when both are aligned.
	if aligned8(inout) && aligned8(in) {
		n = len(inout) &^ 7
		a, b := View[uint64](inout[:n]), View[uint64](in[:n])
		b = b[:len(a)]
		switch code {
		case OpBAnd:
			for i := range a {
				a[i] &= b[i]
			}
		case OpBOr:
			for i := range a {
				a[i] |= b[i]
			}
		default:
			for i := range a {
				a[i] ^= b[i]
			}
		}
	}
	a, b := inout[n:], in[n:len(inout)]
	switch code {
	case OpBAnd:
		for i := range a {
			a[i] &= b[i]
		}
	case OpBOr:
		for i := range a {
			a[i] |= b[i]
		}
	default:
		for i := range a {
			a[i] ^= b[i]
		}
	}
}

// half reduces a 16-bit float type through float32: each element is widened
// exactly, combined in float32 and rounded back to nearest even, so a
// reduction over p ranks rounds p−1 times (as NCCL does), not once.
func half(code OpCode, wide func(uint16) float32, narrow func(float32) uint16) func(inout, in []byte) {
	var f func(x, y float32) float32
	switch code {
	case OpSum, OpAvg:
		f = func(x, y float32) float32 { return x + y }
	case OpProd:
		f = func(x, y float32) float32 { return x * y }
	case OpMin:
		f = func(x, y float32) float32 { return min(x, y) }
	case OpMax:
		f = func(x, y float32) float32 { return max(x, y) }
	case OpLAnd:
		f = func(x, y float32) float32 { return boolTo[float32](x != 0 && y != 0) }
	case OpLOr:
		f = func(x, y float32) float32 { return boolTo[float32](x != 0 || y != 0) }
	default:
		return nil
	}
	return func(inout, in []byte) {
		a, b := View[uint16](inout), View[uint16](in)
		b = b[:len(a)]
		for i := range a {
			a[i] = narrow(f(wide(a[i]), wide(b[i])))
		}
	}
}

func divider(dt DType) func(buf []byte, n int) {
	switch dt {
	case Int8:
		return divide[int8]
	case Int16:
		return divide[int16]
	case Int32:
		return divide[int32]
	case Int64:
		return divide[int64]
	case Uint8:
		return divide[uint8]
	case Uint16:
		return divide[uint16]
	case Uint32:
		return divide[uint32]
	case Uint64:
		return divide[uint64]
	case Float32:
		return divide[float32]
	case Float64:
		return divide[float64]
	case BF16:
		return func(buf []byte, n int) {
			for i, v := range View[BFloat16](buf) {
				View[BFloat16](buf)[i] = BFloat16From(v.Float32() / float32(n))
			}
		}
	case F16:
		return func(buf []byte, n int) {
			for i, v := range View[Float16](buf) {
				View[Float16](buf)[i] = Float16From(v.Float32() / float32(n))
			}
		}
	}
	return nil
}

func divide[T number](buf []byte, n int) {
	if n <= 1 {
		return
	}
	d := T(n)
	a := View[T](buf)
	for i := range a {
		a[i] /= d
	}
}

// sumBF16 and sumF16 are the hot 16-bit sums with the conversions inlined
// (no function values in the loop).
func sumBF16(inout, in []byte) {
	a, b := View[BFloat16](inout), View[BFloat16](in)
	b = b[:len(a)]
	for i := range a {
		a[i] = BFloat16From(a[i].Float32() + b[i].Float32())
	}
}

func sumF16(inout, in []byte) {
	a, b := View[Float16](inout), View[Float16](in)
	b = b[:len(a)]
	t := f16Table()
	for i := range a {
		a[i] = Float16From(t[a[i]] + t[b[i]])
	}
}

// f16Table widens every Float16 by lookup (256 KiB, built on first use):
// faster than the bit manipulation of Float16.Float32 in the sum loop.
var f16Table = sync.OnceValue(func() *[1 << 16]float32 {
	var t [1 << 16]float32
	for i := range t {
		t[i] = Float16(i).Float32()
	}
	return &t
})
