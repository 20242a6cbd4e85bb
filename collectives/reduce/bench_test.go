package reduce

import (
	"testing"
)

// BenchmarkKernels compares each hot kernel with the plain loop in the same
// run. Run: go test -run x -bench Kernels ./collectives/reduce/
func BenchmarkKernels(b *testing.B) {
	const n = 1 << 16 // 64 Ki elements: in L2, so the kernel, not memory, is measured
	f32a, f32b := make([]float32, n), make([]float32, n)
	f64a, f64b := make([]float64, n), make([]float64, n)
	i32a, i32b := make([]int32, n), make([]int32, n)
	u8a, u8b := make([]uint8, n), make([]uint8, n)
	h16a, h16b := make([]BFloat16, n), make([]BFloat16, n)
	f16a, f16b := make([]Float16, n), make([]Float16, n)
	for i := range n {
		f32a[i], f32b[i] = float32(i%100), float32(i%7)
		f64a[i], f64b[i] = float64(i%100), float64(i%7)
		i32a[i], i32b[i] = int32(i), int32(i%7)
		u8a[i], u8b[i] = uint8(i), uint8(i>>3)
		h16a[i], h16b[i] = BFloat16From(float32(i%100)), BFloat16From(1)
		f16a[i], f16b[i] = Float16From(float32(i%100)), Float16From(1)
	}
	kern := func(op Op, dt DType) func(a, b []byte) {
		k, err := op.Resolve(dt)
		if err != nil {
			b.Fatal(err)
		}
		return k.Combine
	}
	run := func(name string, bytes int, f func()) {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(bytes))
			b.ReportAllocs()
			for b.Loop() {
				f()
			}
		})
	}
	sumF32, sumF64 := kern(Sum, Float32), kern(Sum, Float64)
	minF32, maxI32 := kern(Min, Float32), kern(Max, Int32)
	sumI32, bxorU8, bandI32 := kern(Sum, Int32), kern(BXor, Uint8), kern(BAnd, Int32)
	sumBF, sumF16, prodF32 := kern(Sum, BF16), kern(Sum, F16), kern(Prod, Float32)

	run("sum/float32/plain", 4*n, func() { SumPlain(f32a, f32b) })
	run("sum/float32/unrolled", 4*n, func() { SumUnrolled(f32a, f32b) })
	run("sum/float32/kernel", 4*n, func() { sumF32(Bytes(f32a), Bytes(f32b)) })
	run("sum/float64/plain", 8*n, func() { SumPlain(f64a, f64b) })
	run("sum/float64/unrolled", 8*n, func() { SumUnrolled(f64a, f64b) })
	run("sum/float64/kernel", 8*n, func() { sumF64(Bytes(f64a), Bytes(f64b)) })
	run("sum/int32/plain", 4*n, func() { SumPlain(i32a, i32b) })
	run("sum/int32/kernel", 4*n, func() { sumI32(Bytes(i32a), Bytes(i32b)) })
	run("min/float32/plain", 4*n, func() { MinPlain(f32a, f32b) })
	run("min/float32/kernel", 4*n, func() { minF32(Bytes(f32a), Bytes(f32b)) })
	run("max/int32/plain", 4*n, func() {
		for i := range i32a {
			i32a[i] = max(i32a[i], i32b[i])
		}
	})
	run("max/int32/kernel", 4*n, func() { maxI32(Bytes(i32a), Bytes(i32b)) })
	run("prod/float32/plain", 4*n, func() {
		for i := range f32a {
			f32a[i] *= f32b[i]
		}
	})
	run("prod/float32/kernel", 4*n, func() { prodF32(Bytes(f32a), Bytes(f32b)) })
	run("bxor/uint8/plain", n, func() {
		for i := range u8a {
			u8a[i] ^= u8b[i]
		}
	})
	run("bxor/uint8/kernel", n, func() { bxorU8(Bytes(u8a), Bytes(u8b)) })
	run("band/int32/plain", 4*n, func() {
		for i := range i32a {
			i32a[i] &= i32b[i]
		}
	})
	run("band/int32/kernel", 4*n, func() { bandI32(Bytes(i32a), Bytes(i32b)) })
	run("sum/bfloat16/plain", 2*n, func() {
		for i := range h16a {
			h16a[i] = BFloat16From(h16a[i].Float32() + h16b[i].Float32())
		}
	})
	run("sum/bfloat16/kernel", 2*n, func() { sumBF(Bytes(h16a), Bytes(h16b)) })
	run("sum/float16/plain", 2*n, func() {
		for i := range f16a {
			f16a[i] = Float16From(f16a[i].Float32() + f16b[i].Float32())
		}
	})
	run("sum/float16/kernel", 2*n, func() { sumF16(Bytes(f16a), Bytes(f16b)) })
}
