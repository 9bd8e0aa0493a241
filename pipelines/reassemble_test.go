package pipelines

import (
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/warpflow/warpflow/internal/allocs"
	"github.com/warpflow/warpflow/rings"
)

// fragV4 splits an IPv4 packet (with Ethernet header) into fragments of
// the given payload sizes (the last takes the rest), in order.
func fragV4(t testing.TB, pkt []byte, sizes ...int) [][]byte {
	t.Helper()
	ip := pkt[14:]
	ihl := int(ip[0]&15) * 4
	tot := int(binary.BigEndian.Uint16(ip[2:]))
	payload := ip[ihl:tot]
	var out [][]byte
	off := 0
	for i := 0; off < len(payload); i++ {
		n := len(payload) - off
		if i < len(sizes) && sizes[i] < n {
			n = sizes[i]
		}
		f := append(append([]byte(nil), pkt[:14+ihl]...), payload[off:off+n]...)
		h := f[14:]
		binary.BigEndian.PutUint16(h[2:], uint16(ihl+n))
		fo := uint16(off / 8)
		if off+n < len(payload) {
			fo |= 0x2000
		}
		binary.BigEndian.PutUint16(h[6:], fo)
		h[10], h[11] = 0, 0
		binary.BigEndian.PutUint16(h[10:], ^inetFold(inetSum(h[:ihl], 0)))
		out = append(out, f)
		off += n
	}
	return out
}

// fragV6 splits an IPv6 packet (no extension headers) into fragments with
// a fragment header of identification id.
func fragV6(t testing.TB, pkt []byte, id uint32, sizes ...int) [][]byte {
	t.Helper()
	ip := pkt[14:]
	payload := ip[40 : 40+int(binary.BigEndian.Uint16(ip[4:]))]
	nh := ip[6]
	var out [][]byte
	off := 0
	for i := 0; off < len(payload); i++ {
		n := len(payload) - off
		if i < len(sizes) && sizes[i] < n {
			n = sizes[i]
		}
		f := append([]byte(nil), pkt[:14+40]...)
		fh := make([]byte, 8)
		fh[0] = nh
		fo := uint16(off/8) << 3
		if off+n < len(payload) {
			fo |= 1
		}
		binary.BigEndian.PutUint16(fh[2:], fo)
		binary.BigEndian.PutUint32(fh[4:], id)
		f = append(append(f, fh...), payload[off:off+n]...)
		f[14+6] = protoFragment
		binary.BigEndian.PutUint16(f[14+4:], uint16(8+n))
		out = append(out, f)
		off += n
	}
	return out
}

func raYAML(opts string) string {
	return "name: ra-test\nsettings: {batch_size: 256}\nstages:\n  - {name: parse, type: parse}\n" +
		"  - {name: defrag, type: reassemble" + opts + "}\n  - {name: ct, type: conntrack}\n  - {name: out, type: tx, port: out}\n"
}

func TestReassembleShallow(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		t.Run(fmt.Sprint("v6=", v6), func(t *testing.T) {
			s := newSFRig(t, raYAML(""))
			var frags [][]byte
			if v6 {
				frags = fragV6(t, sfUDP(t, "2001:db8::1", "2001:db8::2", 4000, 53, 300), 77, 104, 104)
			} else {
				frags = fragV4(t, sfUDP(t, cli, srv, 4000, 53, 300), 104, 104)
			}
			if len(frags) != 3 {
				t.Fatalf("%d fragments", len(frags))
			}
			for i, f := range frags {
				o := s.one(f)
				if o.reason != "tx:out" {
					t.Fatalf("fragment %d: %s", i, o.reason)
				}
				if o.m.SrcPort != 4000 || o.m.DstPort != 53 {
					t.Fatalf("fragment %d ports %d > %d", i, o.m.SrcPort, o.m.DstPort)
				}
				if i > 0 && o.m.Flags&rings.FlagVirtualL4 == 0 {
					t.Fatalf("fragment %d lacks FlagVirtualL4", i)
				}
				if string(o.pkt) != string(f) {
					t.Fatalf("fragment %d was changed", i)
				}
				if ctClass(o.m.CT) != "new" {
					t.Fatalf("fragment %d: class %s, want the flow's (new)", i, ctClass(o.m.CT))
				}
			}
			st := s.stage("defrag").(*raStage)
			if len(st.free) != st.t.maxDg || stCounter(st, "datagrams") != 1 || stCounter(st, "virtual") != 2 {
				t.Fatalf("free %d of %d, datagrams %d, virtual %d", len(st.free), st.t.maxDg, stCounter(st, "datagrams"), stCounter(st, "virtual"))
			}
			// Out of order: a later fragment first has no ports to give.
			s2 := newSFRig(t, raYAML(""))
			if o := s2.one(frags[2]); o.reason != "drop:frag_no_first" {
				t.Fatalf("later fragment first: %s", o.reason)
			}
		})
	}
}

func TestReassembleFull(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		t.Run(fmt.Sprint("v6=", v6), func(t *testing.T) {
			var orig []byte
			var frags [][]byte
			if v6 {
				orig = sfTCP(t, tcpSpec{src: "2001:db8::1", dst: "2001:db8::2", sport: 5, dport: 80, flags: "S", seq: 1, payload: 900})
				frags = fragV6(t, orig, 9, 400, 400)
			} else {
				orig = sfTCP(t, tcpSpec{src: cli, dst: srv, sport: 5, dport: 80, flags: "S", seq: 1, payload: 900})
				frags = fragV4(t, orig, 400, 400)
			}
			for _, order := range [][]int{{0, 1, 2}, {2, 0, 1}, {1, 2, 0}} {
				s := newSFRig(t, raYAML(", mode: full"))
				for k, fi := range order {
					o := s.one(frags[fi])
					if k < len(order)-1 {
						if o.reason != "drop:frag_merged" {
							t.Fatalf("order %v fragment %d: %s", order, fi, o.reason)
						}
						continue
					}
					if o.reason != "tx:out" {
						t.Fatalf("order %v: completing fragment %s", order, o.reason)
					}
					if string(o.pkt) != string(orig) {
						t.Fatalf("order %v: reassembled\n%x\nwant\n%x", order, o.pkt, orig)
					}
					if o.m.Flags&rings.FlagFragment != 0 || o.m.Flags&rings.FlagL4 == 0 || o.m.DstPort != 80 || ctClass(o.m.CT) != "new" {
						t.Fatalf("order %v: meta not re-parsed: flags %x port %d ct %s", order, o.m.Flags, o.m.DstPort, ctClass(o.m.CT))
					}
				}
			}
		})
	}
}

func TestReassembleAttacks(t *testing.T) {
	udp := sfUDP(t, cli, srv, 4000, 53, 300)
	frags := fragV4(t, udp, 104, 104)
	tcp := sfTCP(t, tcpSpec{src: cli, dst: srv, sport: 5, dport: 80, flags: "S", seq: 1, payload: 100})
	for _, full := range []bool{false, true} {
		opts := ""
		if full {
			opts = ", mode: full"
		}
		t.Run(fmt.Sprint("full=", full), func(t *testing.T) {
			// Overlap: the datagram's later fragments all go.
			s := newSFRig(t, raYAML(opts))
			s.one(frags[0])
			over := fragV4(t, udp, 96, 104)[1] // starts at 96: overlaps [0,104)
			if o := s.one(over); o.reason != "drop:frag_overlap" {
				t.Fatalf("overlap: %s", o.reason)
			}
			if o := s.one(frags[1]); o.reason != "drop:frag_overlap" {
				t.Fatalf("after an overlap: %s", o.reason)
			}
			// An exact duplicate is dropped alone.
			s = newSFRig(t, raYAML(opts))
			s.one(frags[0])
			if o := s.one(frags[0]); o.reason != "drop:frag_overlap" {
				t.Fatalf("duplicate: %s", o.reason)
			}
			s.one(frags[1])
			if o := s.one(frags[2]); full && o.reason != "tx:out" || !full && o.reason != "tx:out" {
				t.Fatalf("datagram after a duplicate: %s", o.reason)
			}
			// Too many fragments.
			s = newSFRig(t, raYAML(opts+", max_fragments: 2"))
			many := fragV4(t, udp, 64, 64, 64)
			s.one(many[0])
			s.one(many[1])
			if o := s.one(many[2]); o.reason != "drop:frag_too_many" {
				t.Fatalf("third of max 2: %s", o.reason)
			}
			// Tiny first fragment: 8 bytes of a 20-byte TCP header.
			s = newSFRig(t, raYAML(opts))
			if o := s.one(fragV4(t, tcp, 8)[0]); o.reason != "drop:frag_tiny" {
				t.Fatalf("tiny first fragment: %s", o.reason)
			}
			// Offset 8 on TCP (RFC 1858's flag overwrite).
			s = newSFRig(t, raYAML(opts))
			if o := s.one(fragV4(t, tcp, 8, 100)[1]); o.reason != "drop:frag_tiny" {
				t.Fatalf("TCP fragment at offset 8: %s", o.reason)
			}
			// A non-last fragment whose payload is not a multiple of 8.
			s = newSFRig(t, raYAML(opts))
			odd := fragV4(t, udp, 100)
			if o := s.one(odd[0]); o.reason != "drop:frag_inconsistent" {
				t.Fatalf("payload of 100 in a non-last fragment: %s", o.reason)
			}
		})
	}
	// RFC 5722 on IPv6 too.
	s := newSFRig(t, raYAML(""))
	v6 := sfUDP(t, "2001:db8::1", "2001:db8::2", 4000, 53, 300)
	a, b := fragV6(t, v6, 3, 104), fragV6(t, v6, 3, 96)
	s.one(a[0])
	if o := s.one(b[1]); o.reason != "drop:frag_overlap" {
		t.Fatalf("IPv6 overlap: %s", o.reason)
	}
}

// TestReassembleTimeoutAndBounds: a datagram is forgotten after the
// timeout; a full table evicts the datagram nearest to its timeout.
func TestReassembleTimeoutAndBounds(t *testing.T) {
	s := newSFRig(t, raYAML(", timeout: 5, max_datagrams: 2"))
	frags := fragV4(t, sfUDP(t, cli, srv, 4000, 53, 300), 104, 104)
	s.one(frags[0])
	s.advance(6000)
	if o := s.one(frags[1]); o.reason != "drop:frag_no_first" {
		t.Fatalf("after the timeout: %s", o.reason)
	}
	for i := range 3 {
		d := sfUDP(t, cli, srv, uint16(5000+i), 53, 300)
		d[14+5] = byte(i + 10) // another IP ID per datagram
		s.one(fragV4(t, d, 104, 104)[0])
		s.advance(10)
	}
	st := s.stage("defrag").(*raStage)
	if stCounter(st, "evictions")+stCounter(st, "expiries") < 1 || len(st.free) != 0 {
		t.Fatalf("evictions %d expiries %d free %d", stCounter(st, "evictions"), stCounter(st, "expiries"), len(st.free))
	}
}

func TestReassembleZeroAlloc(t *testing.T) {
	for _, opts := range []string{"", ", mode: full"} {
		s := newSFRig(t, raYAML(opts))
		var pkts [][]byte
		for i := range 20 {
			d := sfUDP(t, cli, srv, uint16(5000+i), 53, 300)
			pkts = append(pkts, fragV4(t, d, 104, 104)...)
		}
		b := stFillBatch(t, s.a, pkts)
		orig := make([][]byte, len(pkts))
		for i := range pkts {
			orig[i] = append([]byte(nil), b.Packet(i)...)
		}
		n := allocs.Count(50, func() {
			for i := range orig {
				b.Descs[i].Len = uint32(copy(b.Packet(i)[:cap(b.Packet(i))], orig[i]))
				b.Meta[i].Time += 1000
			}
			s.r.Process(b)
		})
		if n != 0 {
			t.Fatalf("%q: %d allocations in 50 batches, want 0", opts, n)
		}
	}
}

func TestReassembleBuildErrors(t *testing.T) {
	for _, c := range []struct{ src, want string }{
		{`{mode: deep}`, `mode "deep"`},
		{`{max_fragments: 1}`, "max_fragments 1"},
		{`{max_datagrams: 0}`, "max_datagrams 0"},
		{`{timeout: 0}`, "timeout 0"},
		{`{max_bytes: 9000}`, "mode: full only"},
		{`{mode: full, max_bytes: 100}`, "max_bytes 100"},
	} {
		t.Run(c.src, func(t *testing.T) { stWantBuildError(t, reassembleKind, c.src, c.want) })
	}
}
