package ntcopy

import (
	"unsafe"

	"github.com/klauspost/cpuid/v2"
)

// haveNT: MOVNTDQ is SSE2, part of every amd64 CPU.
const haveNT = true

// ntcopy copies n bytes (a multiple of 64) from src to the 16-byte
// aligned dst with non-temporal stores, then fences.
//
//go:noescape
func ntcopy(dst, src unsafe.Pointer, n uintptr)

// prefetch asks for the lines cache lines from p on to be loaded into
// this core's caches, without waiting for them.
//
//go:noescape
func prefetch(p unsafe.Pointer, lines uintptr)

//go:noescape
func prefetchWrite(p unsafe.Pointer)

// extFeatures is CPUID leaf 0x80000001's ECX (0 without that leaf).
func extFeatures() uint32

// havePrefetchW: CPUID.80000001H:ECX.PRFCHW[bit 8].
var havePrefetchW = extFeatures()&(1<<8) != 0

// haveMovs: the CPU copies fast with REP MOVSB (ERMS).
var haveMovs = cpuid.CPU.Supports(cpuid.ERMS)

// movs copies n bytes from src to dst with REP MOVSB; they must not
// overlap.
//
//go:noescape
func movs(dst, src unsafe.Pointer, n uintptr)

// wide copies n >= 64 bytes from src to dst, which must not overlap,
// with 64-byte AVX-512 moves.
//
//go:noescape
func wide(dst, src unsafe.Pointer, n uintptr)

// AVX512 says whether this process uses 512-bit registers (the wide copy
// here, the wide sums of collectives/reduce): the CPU and the OS support
// AVX-512, and the CPU is not one of Intel's first AVX-512 generations
// (Skylake to Cooper Lake server parts, which lack VBMI2), which slow the
// core's clock while 512-bit registers are in use, as C libraries avoid
// them there too.
var AVX512 = cpuid.CPU.Supports(cpuid.AVX512F) &&
	(cpuid.CPU.VendorID != cpuid.Intel || cpuid.CPU.Supports(cpuid.AVX512VBMI2))

// haveWide: wide runs here (AVX512).
var haveWide = AVX512

// ticks reads the time-stamp counter (Chooser times its copies by it: a
// read costs a few ns where the clock costs tens).
func ticks() uint64
