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
