#include "textflag.h"

// func prefetchSlot(p *uint64)
TEXT ·prefetchSlot(SB), NOSPLIT|NOFRAME, $0-8
	MOVQ p+0(FP), AX
	PREFETCHT0 (AX)
	RET

// func prefetchEntry(p *ctEntry)
TEXT ·prefetchEntry(SB), NOSPLIT|NOFRAME, $0-8
	MOVQ p+0(FP), AX
	PREFETCHT0 (AX)
	PREFETCHT0 64(AX)
	RET

// func prefetchEntries(ent *ctEntry, cand *uint32, n int)
// For each of the n candidates cand[0:n] that is not 0 (entry+1<<1 |
// dir), both cache lines of entry ent[cand>>1-1] (96 bytes each).
TEXT ·prefetchEntries(SB), NOSPLIT|NOFRAME, $0-24
	MOVQ ent+0(FP), AX
	MOVQ cand+8(FP), BX
	MOVQ n+16(FP), CX
	TESTQ CX, CX
	JLE done
loop:
	MOVL (BX), DX
	TESTL DX, DX
	JZ next
	SHRL $1, DX
	DECL DX
	IMUL3Q $96, DX, DX
	PREFETCHT0 (AX)(DX*1)
	PREFETCHT0 64(AX)(DX*1)
next:
	ADDQ $4, BX
	DECQ CX
	JNZ loop
done:
	RET
