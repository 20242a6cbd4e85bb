#include "textflag.h"

// ADDLOOP(add) adds the CX bytes at SI to those at DI, 256 bytes (four
// 64-byte registers) a round; CX is a positive multiple of 256 and add is
// VADDPS, VADDPD, VPADDD or VPADDQ (VMOVUPS moves any type's bits). Each
// function using it has its own label scope.
#define ADDLOOP(add) \
	SHRQ $8, CX \
wloop: \
	VMOVUPS 0(DI), Z0 \
	VMOVUPS 64(DI), Z1 \
	VMOVUPS 128(DI), Z2 \
	VMOVUPS 192(DI), Z3 \
	add 0(SI), Z0, Z0 \
	add 64(SI), Z1, Z1 \
	add 128(SI), Z2, Z2 \
	add 192(SI), Z3, Z3 \
	VMOVUPS Z0, 0(DI) \
	VMOVUPS Z1, 64(DI) \
	VMOVUPS Z2, 128(DI) \
	VMOVUPS Z3, 192(DI) \
	ADDQ $256, DI \
	ADDQ $256, SI \
	DECQ CX \
	JNZ  wloop \
	VZEROUPPER

// SUMWIDE(shift, add) is a function body: a[i] += b[i] for the n
// elements of 1<<shift bytes each, n a positive multiple of 256>>shift.
#define SUMWIDE(shift, add) \
	MOVQ a+0(FP), DI \
	MOVQ b+8(FP), SI \
	MOVQ n+16(FP), CX \
	SHLQ $shift, CX \
	ADDLOOP(add) \
	RET

// func addF32Wide(a, b *float32, n int)
TEXT ·addF32Wide(SB), NOSPLIT, $0-24
	SUMWIDE(2, VADDPS)

// func addF64Wide(a, b *float64, n int)
TEXT ·addF64Wide(SB), NOSPLIT, $0-24
	SUMWIDE(3, VADDPD)

// func addI32Wide(a, b *uint32, n int): wrapping, int32 and uint32 alike.
TEXT ·addI32Wide(SB), NOSPLIT, $0-24
	SUMWIDE(2, VPADDD)

// func addI64Wide(a, b *uint64, n int): wrapping.
TEXT ·addI64Wide(SB), NOSPLIT, $0-24
	SUMWIDE(3, VPADDQ)
