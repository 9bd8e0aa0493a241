// Package afxdp joins the engine (package dataplane) and the kernel gateway
// (package xdp): a dataplane.Port over an AF_XDP socket, and the setup of
// one receive queue's frame memory and sockets.
//
// # Frames and owners
//
// Each served receive queue has its own UMEM, mapped by xdp/, and one
// rings.Arena sitting on it (rings.NewArenaOn), so the engine's descriptors
// are the kernel's: a received frame is handed to the pipeline where the
// kernel wrote it, and transmitted from there. The queue's receive socket
// registered the UMEM; a transmit socket on each output interface binds
// with XDP_SHARED_UMEM to the same UMEM (its own fill and completion rings,
// as the kernel requires for another device), which is what lets a frame
// received on one interface leave by another without a copy.
//
// A frame is in exactly one place:
//
//	arena free stack --Receive tops up--> fill ring --kernel takes--> kernel (RX)
//	kernel (RX) --writes a packet--> RX ring --Receive--> engine / workers
//	engine --Transmit--> TX ring --kernel takes--> kernel (TX) --sent--> completion ring
//	completion ring --Complete--> engine --Recycle--> fill ring (or the arena when it is full)
//	engine (drop, pass, refused) --Recycle--> fill ring
//
// Transmit takes ownership of the frames it accepts: they are the kernel's
// until they show on the completion ring, and only Complete hands them back
// (recycling them earlier is the duplicated-frame bug). Every place's count
// comes from the rings' shared indices (FramePlaces), read with atomics, so
// the accounting can be read from another goroutine while the queue runs.
//
// # Idle: spin, then poll
//
// A receiving Port is a dataplane.Waiter: when a turn of the engine's loop
// found nothing, Wait spins for a few turns, then sleeps in poll(2) until
// the kernel puts a packet on the RX ring (its wake-up comes at the end of
// each NAPI poll, with a batch) or the engine's timeout ends. The spin
// budget adapts: it doubles when packets arrived while spinning (the
// kernel's receive work runs on another core, so spinning saves a wake-up)
// and halves when a spin ran out (down to 2 turns). Where the kernel's
// receive work shares the dataplane's core (threaded NAPI pinned there, or
// a NIC's interrupt), nothing can arrive while the loop spins, so the loop
// soon yields at once and the kernel thread gets the core: no receive
// livelock. runtime.Gosched would not do: it does not give up the OS
// thread. Polls counts the sleeps.
//
// # Hazards
//
// A port is driven by one goroutine, the engine's I/O loop. The kernel
// drops a frame on the floor when the RX ring is full (counted by the
// socket's XDP_STATISTICS, which Stats reports), and a TX descriptor it
// finds invalid is consumed without completion: the engine only transmits
// descriptors it received, which the kernel wrote, so none is invalid.
//
// A frame on a TX ring when its port stops (the link down, the device
// refusing it, a full completion ring) was counted as transmitted and
// never leaves. Settle (the daemon calls it through Queue.Settle when the
// queue's engine returns; Close calls it too) makes a last bounded flush,
// a fixed number of kicks with the completion ring taken back between
// them, and counts what still has not completed as the socket's
// tx_abandoned: for every socket, tx = completions + tx_abandoned after
// it.
package afxdp
