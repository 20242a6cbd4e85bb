#include "textflag.h"

// func ntcopy(dst, src unsafe.Pointer, n uintptr)
TEXT ·ntcopy(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $6, CX
	JZ   done

loop:
	MOVOU 0(SI), X0
	MOVOU 16(SI), X1
	MOVOU 32(SI), X2
	MOVOU 48(SI), X3
	MOVNTO X0, 0(DI)
	MOVNTO X1, 16(DI)
	MOVNTO X2, 32(DI)
	MOVNTO X3, 48(DI)
	ADDQ $64, SI
	ADDQ $64, DI
	DECQ CX
	JNZ  loop
	SFENCE

done:
	RET

// func prefetch(p unsafe.Pointer, lines uintptr)
TEXT ·prefetch(SB), NOSPLIT, $0-16
	MOVQ p+0(FP), AX
	MOVQ lines+8(FP), CX
	TESTQ CX, CX
	JZ   pdone

ploop:
	PREFETCHT0 0(AX)
	ADDQ $64, AX
	DECQ CX
	JNZ  ploop

pdone:
	RET

// func movs(dst, src unsafe.Pointer, n uintptr)
TEXT ·movs(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	REP; MOVSB
	RET

// func prefetchWrite(p unsafe.Pointer)
TEXT ·prefetchWrite(SB), NOSPLIT, $0-8
	MOVQ p+0(FP), AX
	BYTE $0x0F; BYTE $0x0D; BYTE $0x08 // PREFETCHW (AX)
	RET

// func extFeatures() uint32
TEXT ·extFeatures(SB), NOSPLIT, $0-4
	MOVL $0x80000000, AX
	CPUID
	CMPL AX, $0x80000001
	JB   none
	MOVL $0x80000001, AX
	XORL CX, CX
	CPUID
	MOVL CX, ret+0(FP)
	RET
none:
	MOVL $0, ret+0(FP)
	RET

// MOVE256 moves the 256 bytes at SI to DI, four 64-byte registers, and
// advances both past them and CX, the bytes left, by 256.
#define MOVE256 \
	VMOVDQU64 0(SI), Z0 \
	VMOVDQU64 64(SI), Z1 \
	VMOVDQU64 128(SI), Z2 \
	VMOVDQU64 192(SI), Z3 \
	VMOVDQU64 Z0, 0(DI) \
	VMOVDQU64 Z1, 64(DI) \
	VMOVDQU64 Z2, 128(DI) \
	VMOVDQU64 Z3, 192(DI) \
	ADDQ $256, SI \
	ADDQ $256, DI \
	SUBQ $256, CX

// func wide(dst, src unsafe.Pointer, n uintptr)
// n >= 64; dst and src do not overlap. 64-byte AVX-512 moves, four a
// round; the last 64 bytes, loaded first, are stored last (overlapping
// what the rounds wrote, with the same bytes). From 4 KiB the rounds
// prefetch the source 512 bytes ahead, as Go's copy does: without, a
// receiver copying 16-32 KiB fragments another core wrote past the caches
// (bibw over shm) ran at 0.77-0.96 of the rate of Go's copy.
TEXT ·wide(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	VMOVDQU64 -64(SI)(CX*1), Z4
	LEAQ -64(DI)(CX*1), R8
	CMPQ CX, $256
	JB   wsmall
	CMPQ CX, $4096
	JB   wloop

wploop:
	PREFETCHT0 512(SI)
	PREFETCHT0 576(SI)
	PREFETCHT0 640(SI)
	PREFETCHT0 704(SI)
	MOVE256
	CMPQ CX, $768
	JAE  wploop
	CMPQ CX, $256
	JB   wsmall

wloop:
	MOVE256
	CMPQ CX, $256
	JAE  wloop

wsmall:
	CMPQ CX, $64
	JBE  wtail
	VMOVDQU64 0(SI), Z0
	VMOVDQU64 Z0, 0(DI)
	ADDQ $64, SI
	ADDQ $64, DI
	SUBQ $64, CX
	JMP  wsmall

wtail:
	VMOVDQU64 Z4, 0(R8)
	VZEROUPPER
	RET

// func ticks() uint64
// The time-stamp counter, after the instructions before it have finished
// (LFENCE), for Chooser's relative timings.
TEXT ·ticks(SB), NOSPLIT, $0-8
	LFENCE
	RDTSC
	SHLQ $32, DX
	ORQ  DX, AX
	MOVQ AX, ret+0(FP)
	RET
