package reduce

import "github.com/rdmago/rdmago/internal/ntcopy"

// useWide: the process uses 512-bit registers (ntcopy.AVX512, one rule for
// the copies and the sums). Then float sums add 16 float32 (8 float64) an
// instruction, where gonum's SSE kernels add 4 (2): 3.7x the rate at 4
// KiB, 1.9-2.4x at 64-256 KiB in cache, 1.15x at 1 MiB (BenchmarkKernels).
var useWide = ntcopy.AVX512

// addF32Wide sets a[i] += b[i] for i < n, a positive multiple of 64.
//
//go:noescape
func addF32Wide(a, b *float32, n int)

// addF64Wide sets a[i] += b[i] for i < n, a positive multiple of 32.
//
//go:noescape
func addF64Wide(a, b *float64, n int)

// addI32Wide sets a[i] += b[i], wrapping, for i < n, a positive multiple
// of 64 (int32 and uint32 alike: two's complement adds the same bits).
//
//go:noescape
func addI32Wide(a, b *uint32, n int)

// addI64Wide sets a[i] += b[i], wrapping, for i < n, a positive multiple
// of 32.
//
//go:noescape
func addI64Wide(a, b *uint64, n int)
