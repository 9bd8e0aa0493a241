package xdp_test

import (
	"log"
	"time"

	"github.com/warpflow/warpflow/rings"
	"github.com/warpflow/warpflow/xdp"
)

// A receive-and-drop loop on one queue: frames go fill -> kernel -> RX ->
// us and straight back onto the fill ring. A real engine hands the
// descriptors to workers and transmits some of them instead.
func Example() {
	u, err := xdp.NewUMEM(xdp.DefaultUMEMOptions())
	if err != nil {
		log.Fatal(err)
	}
	defer u.Close()
	s, err := xdp.NewSocket(u, xdp.DefaultSocketOptions("eth0", 0))
	if err != nil {
		log.Fatal(err) // e.g. "xsk eth0 queue 0: bind: queue 0 of eth0 is already bound ..."
	}
	defer s.Close() // runs before u.Close
	p, err := xdp.LoadProgram(xdp.ProgramOptions{Interface: "eth0"})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
	log.Printf("attached %v, bound %v", p.Attached(), s.Bound())
	if err := p.Register(0, s); err != nil {
		log.Fatal(err)
	}

	// Give the kernel half the frames to receive into.
	o := u.Options()
	addrs := make([]uint64, s.Fill().Size())
	for i := range addrs {
		addrs[i] = uint64(i * o.FrameSize)
	}
	s.Fill().ProduceAddrs(addrs)

	batch := make([]rings.Desc, 64)
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); {
		n := s.RX().Consume(batch)
		if n == 0 {
			if err := s.Err(); err != nil {
				log.Fatal(err) // ENETDOWN: the interface went away
			}
			s.WakeRX()
			s.Poll(time.Millisecond)
			continue
		}
		// The frames are ours: drop them by refilling.
		s.Fill().FillFrom(batch[:n], u.FrameMask())
	}
}
