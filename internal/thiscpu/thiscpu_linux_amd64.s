#include "textflag.h"

// func lsl(sel uint32) (limit uint32, ok bool)
TEXT ·lsl(SB), NOSPLIT, $0-13
	MOVL sel+0(FP), BX
	XORL AX, AX
	LSLL BX, AX
	SETEQ CX
	MOVL AX, limit+8(FP)
	MOVB CX, ok+12(FP)
	RET
