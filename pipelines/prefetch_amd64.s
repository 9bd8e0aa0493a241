#include "textflag.h"
#include "go_asm.h"

// Both loops count an index up from minus the length to zero: it both
// addresses the element (from the slice's end) and ends the loop.

// func prefetchSlots(idx *uint64, slots uint64, hints []uint64)
TEXT ·prefetchSlots(SB), NOSPLIT|NOFRAME, $0-40
	MOVQ idx+0(FP), DI
	MOVQ slots+8(FP), SI
	MOVQ hints_base+16(FP), BX
	MOVQ hints_len+24(FP), CX
	LEAQ (BX)(CX*8), BX // the end
	NEGQ CX
	JEQ done
loop:
	MOVQ (BX)(CX*8), AX
	TESTQ AX, AX
	JEQ next
	MOVL AX, AX // the hash (the low half)
	IMULQ SI, AX // probeHome: (h * slots) >> 32
	SHRQ $32, AX
	PREFETCHT0 (DI)(AX*8)
next:
	INCQ CX
	JNE loop
done:
	RET

// func prefetchEntries(ent *ctEntry, cands []uint32)
TEXT ·prefetchEntries(SB), NOSPLIT|NOFRAME, $0-32
	MOVQ ent+0(FP), DI
	MOVQ cands_base+8(FP), BX
	MOVQ cands_len+16(FP), CX
	LEAQ (BX)(CX*4), BX // the end
	NEGQ CX
	JEQ done
loop:
	MOVL (BX)(CX*4), AX
	TESTL AX, AX
	JEQ next
	SHRL $1, AX // entry+1: entry e's lines are at -ctEntry__size from it
	IMULQ $ctEntry__size, AX
	PREFETCHT0 -ctEntry__size(DI)(AX*1)
	PREFETCHT0 (64-ctEntry__size)(DI)(AX*1)
next:
	INCQ CX
	JNE loop
done:
	RET
