#include "textflag.h"

// func prefetchSlot(p *uint64)
TEXT ·prefetchSlot(SB), NOSPLIT|NOFRAME, $0-8
	MOVD p+0(FP), R0
	PRFM (R0), PLDL1KEEP
	RET

// func prefetchEntry(p *ctEntry)
TEXT ·prefetchEntry(SB), NOSPLIT|NOFRAME, $0-8
	MOVD p+0(FP), R0
	PRFM (R0), PLDL1KEEP
	PRFM 64(R0), PLDL1KEEP
	RET

// func prefetchEntries(ent *ctEntry, cand *uint32, n int)
// For each of the n candidates cand[0:n] that is not 0 (entry+1<<1 |
// dir), both cache lines of entry ent[cand>>1-1] (96 bytes each).
TEXT ·prefetchEntries(SB), NOSPLIT|NOFRAME, $0-24
	MOVD ent+0(FP), R0
	MOVD cand+8(FP), R1
	MOVD n+16(FP), R2
	MOVD $96, R4
	CMP $0, R2
	BLE done
loop:
	MOVWU (R1), R3
	CBZ R3, next
	LSR $1, R3, R3
	SUB $1, R3, R3
	MUL R4, R3, R3
	ADD R0, R3, R3
	PRFM (R3), PLDL1KEEP
	PRFM 64(R3), PLDL1KEEP
next:
	ADD $4, R1, R1
	SUBS $1, R2, R2
	BNE loop
done:
	RET
