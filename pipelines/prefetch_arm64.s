#include "textflag.h"
#include "go_asm.h"

// func prefetchSlots(idx *uint64, slots uint64, hints []uint64)
TEXT ·prefetchSlots(SB), NOSPLIT|NOFRAME, $0-40
	MOVD idx+0(FP), R0
	MOVD slots+8(FP), R1
	MOVD hints_base+16(FP), R2
	MOVD hints_len+24(FP), R3
	CBZ R3, done
loop:
	MOVD.P 8(R2), R4
	CBZ R4, next
	MOVWU R4, R4 // the hash (the low half)
	MUL R1, R4, R4 // probeHome: (h * slots) >> 32
	LSR $32, R4, R4
	ADD R4<<3, R0, R5
	PRFM (R5), PLDL1KEEP
next:
	SUB $1, R3, R3
	CBNZ R3, loop
done:
	RET

// func prefetchEntries(ent *ctEntry, cands []uint32)
TEXT ·prefetchEntries(SB), NOSPLIT|NOFRAME, $0-32
	MOVD ent+0(FP), R0
	MOVD cands_base+8(FP), R2
	MOVD cands_len+16(FP), R3
	MOVD $ctEntry__size, R6
	CBZ R3, done
loop:
	MOVWU.P 4(R2), R4
	CBZ R4, next
	LSR $1, R4, R4 // entry+1
	SUB $1, R4, R4
	MUL R6, R4, R4
	ADD R4, R0, R5
	PRFM (R5), PLDL1KEEP
	PRFM 64(R5), PLDL1KEEP
next:
	SUB $1, R3, R3
	CBNZ R3, loop
done:
	RET
