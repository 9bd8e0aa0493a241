#include "textflag.h"
#include "go_asm.h"

// func prefetchSlots(idx *uint64, slots uint64, hints []uint64)
TEXT ·prefetchSlots(SB), NOSPLIT|NOFRAME, $0-40
	MOVQ idx+0(FP), DI
	MOVQ slots+8(FP), SI
	MOVQ hints_base+16(FP), BX
	MOVQ hints_len+24(FP), CX
	TESTQ CX, CX
	JEQ done
loop:
	MOVQ (BX), AX
	TESTQ AX, AX
	JEQ next
	MOVL AX, AX // the hash (the low half)
	IMULQ SI, AX // probeHome: (h * slots) >> 32
	SHRQ $32, AX
	PREFETCHT0 (DI)(AX*8)
next:
	ADDQ $8, BX
	DECQ CX
	JNE loop
done:
	RET

// func prefetchEntries(ent *ctEntry, cands []uint32)
TEXT ·prefetchEntries(SB), NOSPLIT|NOFRAME, $0-32
	MOVQ ent+0(FP), DI
	MOVQ cands_base+8(FP), BX
	MOVQ cands_len+16(FP), CX
	TESTQ CX, CX
	JEQ done
loop:
	MOVL (BX), AX
	TESTL AX, AX
	JEQ next
	SHRL $1, AX // entry+1
	DECL AX
	IMULQ $ctEntry__size, AX
	PREFETCHT0 (DI)(AX*1)
	PREFETCHT0 64(DI)(AX*1)
next:
	ADDQ $4, BX
	DECQ CX
	JNE loop
done:
	RET
