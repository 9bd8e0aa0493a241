package dataplane

import (
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/warpflow/warpflow/pipelines"
	"github.com/warpflow/warpflow/rings"
)

// The reassemble stage's expiry and its pending gauge, end to end in the
// engine: on a live port a datagram whose last fragment never comes is
// counted expired at its timeout on an idle link (the engine's ticks),
// and a swap that keeps the stage (its counters carry on, its datagrams
// do not: reassembly starts empty) leaves the pending gauge at what the
// new tables hold, whether the workers stay or change. The pipelines
// package tests the stage alone; this is the same through NewEngine, the
// executors and Swap.

const raLiveYAML = `name: %s
settings: {batch_size: 64, workers: %d}
stages:
  - {name: parse, type: parse}
  - {name: ra, type: reassemble, timeout: 2}
  - {name: %s, type: count, by: [protocol]}
  - {name: out, type: tx, port: out}
`

func raLiveGraph(t *testing.T, name string, workers int, countName string) *pipelines.Graph {
	t.Helper()
	g, err := pipelines.Load(name+".yaml", fmt.Appendf(nil, raLiveYAML, name, workers, countName))
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// firstFragment is an IPv4 UDP datagram's first fragment (MF set,
// offset 0) from 10.0.1.<n>, identification id: its datagram stays in
// reassembly until its timeout, as one whose later fragments were lost.
func firstFragment(t *testing.T, n int, id uint16) []byte {
	t.Helper()
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}, EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Id: id, Flags: layers.IPv4MoreFragments, Protocol: layers.IPProtocolUDP,
		SrcIP: netip.AddrFrom4([4]byte{10, 0, 1, byte(n)}).AsSlice(), DstIP: net.IP{198, 51, 100, 7}}
	// The UDP header and 24 bytes of payload: a non-last fragment's
	// payload is a multiple of 8 (32 bytes).
	udp := make([]byte, 32)
	udp[0], udp[1], udp[2], udp[3] = 0x10, 0x00, 0x00, 0x35 // 4096 -> 53
	udp[4], udp[5] = 0x01, 0x00                             // the whole datagram's length: 256
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, eth, ip, gopacket.Payload(udp)); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestReassembleLiveExpiryAndSwap(t *testing.T) {
	const datagrams = 12
	for _, tc := range []struct {
		name         string
		workers      int
		swapTo       int  // the new plan's workers
		swap, expire bool // swap before the timeout; let them expire on the idle link
	}{
		{"idle expiry inline", 0, 0, false, true},
		{"idle expiry 2 workers", 2, 2, false, true},
		{"swap inline", 0, 0, true, false},
		{"swap same workers", 2, 2, true, false},
		{"swap 1 to 2 workers", 1, 2, true, false},
		{"swap then idle expiry", 2, 2, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := fakeClock(t)

			arena, err := rings.NewArena(rings.ArenaOptions{Frames: 1024, FrameSize: 2048, Headroom: 256})
			if err != nil {
				t.Fatal(err)
			}
			in := &pushPort{a: arena}
			o := DefaultOptions()
			o.Workers = tc.workers
			e, err := NewEngine(raLiveGraph(t, "a", max(tc.workers, 1), "c1"), arena, in, Outputs{Ports: map[string]Port{"out": NewNullPort("out")}}, o)
			if err != nil {
				t.Fatal(err)
			}
			stop := runLive(t, e)
			defer func() {
				if err := stop(); err != nil {
					t.Error(err)
				}
			}()
			// waitFor polls the ra stage's counters, the test's clock
			// moving 100 ms a poll (so idle workers tick), until ok.
			waitFor := func(what string, move bool, ok func(pending, expiries uint64) bool) {
				t.Helper()
				deadline := time.Now().Add(10 * time.Second)
				for {
					p, x := e.stageCounter("ra", "pending"), e.stageCounter("ra", "expiries")
					if ok(p, x) {
						return
					}
					if time.Now().After(deadline) {
						t.Fatalf("%s: not within 10 s (pending %d (%d signed), expiries %d)", what, p, int64(p), x)
					}
					time.Sleep(time.Millisecond)
					if move {
						now.Add(100)
					}
				}
			}
			push := func(from int) {
				for n := from; n < from+datagrams; n++ {
					in.push(firstFragment(t, 1+n, uint16(1000+n)), now.Load())
				}
			}
			push(0)
			waitFor("the datagrams held", false, func(p, _ uint64) bool { return p == datagrams })

			var expectExpired uint64
			if tc.swap {
				res, err := e.Swap(raLiveGraph(t, "b", max(tc.swapTo, 1), "c2"), Outputs{Ports: map[string]Port{"out": NewNullPort("out")}}, 0)
				if err != nil {
					t.Fatal(err)
				}
				if !contains(res.Kept, "ra") {
					t.Fatalf("ra not among the kept stages %v: the test needs its counters carried", res.Kept)
				}
				// The old tables are gone with the old plan: the new
				// instances settle the gauge at their first tick, and
				// none of the dropped datagrams counts as expired.
				waitFor("the gauge after the swap", true, func(p, _ uint64) bool { return p == 0 })
				if x := e.stageCounter("ra", "expiries"); x != 0 {
					t.Fatalf("%d expiries after a swap that dropped the datagrams: they did not time out", x)
				}
				// New datagrams count from there.
				push(100)
				waitFor("new datagrams after the swap", true, func(p, _ uint64) bool { return p == datagrams })
			}
			if tc.expire {
				expectExpired = datagrams
				// 2 s timeout, 100 ms a poll: ticks expire them all.
				waitFor("expiry on the idle link", true, func(p, x uint64) bool { return p == 0 && x == expectExpired })
			}
			if x := e.stageCounter("ra", "expiries"); x != expectExpired {
				t.Fatalf("expiries %d, want %d", x, expectExpired)
			}
		})
	}
}
