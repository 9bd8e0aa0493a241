package rings_test

import (
	"fmt"
	"runtime"

	"github.com/warpflow/warpflow/rings"
)

// A producer goroutine hands packet descriptors over an SPSC ring with
// Reserve/At/Submit; the consumer takes them with Peek/At/Release, reads the
// packets in place and frees their frames. Ownership of each frame moves
// with its descriptor: the producer stops touching a frame once it submits
// it.
func Example() {
	arena, err := rings.NewArena(rings.ArenaOptions{Frames: 8, FrameSize: 2048, Headroom: 256})
	if err != nil {
		fmt.Println(err)
		return
	}
	ring, err := rings.NewSPSC(4)
	if err != nil {
		fmt.Println(err)
		return
	}

	// The arena's free stack belongs to one goroutine (this one): it
	// allocates the frames up front and frees them as the consumer.
	addrs := make([]uint64, 6)
	arena.AllocN(addrs)
	for i, addr := range addrs {
		copy(arena.Frame(addr)[arena.Headroom():], fmt.Sprintf("packet %d", i))
	}

	go func() { // producer
		for sent := 0; sent < len(addrs); {
			idx, n := ring.Reserve(min(2, len(addrs)-sent))
			for i := range n {
				*ring.At(idx + uint32(i)) = rings.Desc{Addr: addrs[sent+i], Len: uint32(len("packet 0"))}
			}
			ring.Submit(n) // one atomic store publishes the n descriptors
			sent += n
			if n == 0 {
				runtime.Gosched() // ring full: let the consumer run
			}
		}
	}()

	for got := 0; got < len(addrs); { // consumer
		idx, n := ring.Peek(4)
		for i := range n {
			d := *ring.At(idx + uint32(i)) // copy the 16-byte descriptor, not the packet
			fmt.Printf("%s (frame %d)\n", arena.Bytes(d), d.Addr/uint64(arena.FrameSize()))
			arena.Free(d.Addr) // this goroutine owns the frame now, and the free stack
		}
		ring.Release(n) // the slots go back to the producer
		got += n
		if n == 0 {
			runtime.Gosched() // ring empty: let the producer run
		}
	}

	fmt.Println("free frames:", arena.FreeFrames())
	// Output:
	// packet 0 (frame 0)
	// packet 1 (frame 1)
	// packet 2 (frame 2)
	// packet 3 (frame 3)
	// packet 4 (frame 4)
	// packet 5 (frame 5)
	// free frames: 8
}
