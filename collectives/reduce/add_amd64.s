#include "textflag.h"

// ADDLOOP(add) adds the CX bytes at SI to those at DI, 256 bytes (four
// 64-byte registers) a round; CX is a positive multiple of 256 and add is
// VADDPS or VADDPD (VMOVUPS moves either type's bits). Each function
// using it has its own label scope.
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

// func addF32Wide(a, b *float32, n int)
// a[i] += b[i] for i < n, n a positive multiple of 64.
TEXT ·addF32Wide(SB), NOSPLIT, $0-24
	MOVQ a+0(FP), DI
	MOVQ b+8(FP), SI
	MOVQ n+16(FP), CX
	SHLQ $2, CX
	ADDLOOP(VADDPS)
	RET

// func addF64Wide(a, b *float64, n int)
// a[i] += b[i] for i < n, n a positive multiple of 32.
TEXT ·addF64Wide(SB), NOSPLIT, $0-24
	MOVQ a+0(FP), DI
	MOVQ b+8(FP), SI
	MOVQ n+16(FP), CX
	SHLQ $3, CX
	ADDLOOP(VADDPD)
	RET
