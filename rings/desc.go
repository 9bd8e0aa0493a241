package rings

// Desc is one frame descriptor: where a packet's bytes start in the frame
// arena and how long they are. Its layout is that of the kernel's
// struct xdp_desc (linux/if_xdp.h): u64 addr, u32 len, u32 options, 16 bytes,
// so descriptors read from an AF_XDP RX ring can be stored in our rings and
// written back to a TX or fill ring unchanged.
type Desc struct {
	// Addr is the byte offset of the packet's first byte from the start of
	// the arena (the UMEM). The frame that holds it is Addr &^ (frameSize-1).
	Addr uint64
	// Len is the packet's length in bytes.
	Len uint32
	// Options is passed through untouched (XDP_PKT_CONTD and friends).
	Options uint32
}
