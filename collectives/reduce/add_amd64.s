#include "textflag.h"

// func addF32Wide(a, b *float32, n int)
// a[i] += b[i] for i < n, n a multiple of 64: 64-byte AVX-512 adds, four a
// round.
TEXT ·addF32Wide(SB), NOSPLIT, $0-24
	MOVQ a+0(FP), DI
	MOVQ b+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $6, CX
	JZ   done

loop:
	VMOVUPS 0(DI), Z0
	VMOVUPS 64(DI), Z1
	VMOVUPS 128(DI), Z2
	VMOVUPS 192(DI), Z3
	VADDPS  0(SI), Z0, Z0
	VADDPS  64(SI), Z1, Z1
	VADDPS  128(SI), Z2, Z2
	VADDPS  192(SI), Z3, Z3
	VMOVUPS Z0, 0(DI)
	VMOVUPS Z1, 64(DI)
	VMOVUPS Z2, 128(DI)
	VMOVUPS Z3, 192(DI)
	ADDQ $256, DI
	ADDQ $256, SI
	DECQ CX
	JNZ  loop
	VZEROUPPER

done:
	RET

// func addF64Wide(a, b *float64, n int)
// a[i] += b[i] for i < n, n a multiple of 32.
TEXT ·addF64Wide(SB), NOSPLIT, $0-24
	MOVQ a+0(FP), DI
	MOVQ b+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $5, CX
	JZ   done64

loop64:
	VMOVUPD 0(DI), Z0
	VMOVUPD 64(DI), Z1
	VMOVUPD 128(DI), Z2
	VMOVUPD 192(DI), Z3
	VADDPD  0(SI), Z0, Z0
	VADDPD  64(SI), Z1, Z1
	VADDPD  128(SI), Z2, Z2
	VADDPD  192(SI), Z3, Z3
	VMOVUPD Z0, 0(DI)
	VMOVUPD Z1, 64(DI)
	VMOVUPD Z2, 128(DI)
	VMOVUPD Z3, 192(DI)
	ADDQ $256, DI
	ADDQ $256, SI
	DECQ CX
	JNZ  loop64
	VZEROUPPER

done64:
	RET
