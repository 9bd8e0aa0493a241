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
