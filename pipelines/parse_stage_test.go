package pipelines

import (
	"encoding/binary"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/warpflow/warpflow/internal/allocs"
	"github.com/warpflow/warpflow/rings"
)

func TestParseBuild(t *testing.T) {
	for _, c := range []struct {
		name, src, next string
		wantErr         string // substring; "" for success
		wantTunnels     bool
	}{
		{"defaults", "{name: p, type: parse}", "acl", "", true},
		{"tunnels off", "{name: p, type: parse, tunnels: false}", "acl", "", false},
		{"explicit next key", "{name: p, type: parse, next: acl, tunnels: true}", "acl", "", true},
		{"unknown option", "{name: p, type: parse, tunnel: false}", "acl", `test.yaml:1:24: stage "p": unknown option "tunnel" (known: tunnels)`, false},
		{"wrong type", "{name: p, type: parse, tunnels: maybe}", "acl", `test.yaml:1:33: stage "p": tunnels: want true or false, got "maybe"`, false},
		{"tunnels is a list", "{name: p, type: parse, tunnels: [true]}", "acl", `1:33: stage "p": tunnels: want true or false`, false},
		{"no next", "{name: p, type: parse}", "", "last stage has no next edge", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, errs := ptBuildContext(t, c.src, c.next)
			tpl := parseKind.Build(ctx)
			if c.wantErr != "" {
				if tpl != nil || errs.Len() == 0 || !strings.Contains(errs.Error(), c.wantErr) {
					t.Fatalf("template %v, errors %q; want nil and an error containing %q", tpl, errs.Error(), c.wantErr)
				}
				return
			}
			if tpl == nil || errs.Len() != 0 {
				t.Fatalf("template %v, errors %q", tpl, errs.Error())
			}
			if e := tpl.Edges(); len(e) != 1 || e[0].Stage != c.next {
				t.Fatalf("edges %v, want [%s]", e, c.next)
			}
			st, ok := tpl.NewInstance().(*parseStage)
			if !ok || st.tunnels != c.wantTunnels {
				t.Fatalf("instance %#v, want tunnels=%v", st, c.wantTunnels)
			}
			if tpl.NewInstance() == Stage(st) {
				t.Fatalf("NewInstance returned the same instance twice")
			}
		})
	}
	if parseKind.Name != "parse" || parseKind.Terminal {
		t.Fatalf("kind %+v", parseKind)
	}
}

// ptMixed returns up to n packets covering every generated case and fixture.
func ptMixed(tb testing.TB, n int) [][]byte {
	var all [][]byte
	for _, c := range ptCases(tb) {
		all = append(all, c.pkt)
	}
	for _, f := range ptFixtures() {
		all = append(all, f.pkt)
	}
	// Interleave so that any n-packet prefix mixes kinds.
	var out [][]byte
	for stride := 0; len(out) < n && stride < 7; stride++ {
		for i := stride; i < len(all) && len(out) < n; i += 7 {
			out = append(out, all[i])
		}
	}
	return out
}

func TestParseProcessEdgesAndOwnership(t *testing.T) {
	pkts := ptMixed(t, 64)
	tb := newPTBatch(t, 64)
	tb.load(t, pkts)
	for i := range tb.b.Meta {
		tb.b.Meta[i].Verdict, tb.b.Meta[i].Target, tb.b.Meta[i].InPort = rings.VerdictTX, 3, 7
	}
	// Only odd packets: the even ones must stay untouched.
	var idx []uint16
	for i := 1; i < len(pkts); i += 2 {
		idx = append(idx, uint16(i))
	}
	next := make([]Edge, len(idx))
	for i := range next {
		next[i] = 9
	}
	(&parseStage{tunnels: true}).Process(tb.b, idx, next)
	for k, e := range next {
		if e != 0 {
			t.Errorf("next[%d] = %d, want 0", k, e)
		}
	}
	for i := range pkts {
		m := tb.b.Meta[i]
		if i%2 == 0 {
			want := ptGarbageMeta
			want.Seq, want.Verdict, want.Target, want.InPort = uint64(i), rings.VerdictTX, 3, 7
			if m != want {
				t.Errorf("packet %d not in idx but changed: %s", i, ptFmtMeta(m))
			}
			continue
		}
		if m.Seq != uint64(i) || m.Hash != 0x1234 || m.SampleMask != 5 || m.Verdict != rings.VerdictTX || m.Target != 3 || m.InPort != 7 {
			t.Errorf("packet %d: fields the parse stage does not own changed: %+v", i, m)
		}
		if m.Class == rings.ClassUnparsed {
			t.Errorf("packet %d left unparsed", i)
		}
		ptCheckOffsets(t, "mixed", pkts[i], m)
	}
}

func TestParseZeroAllocs(t *testing.T) {
	pkts := ptMixed(t, 64)
	if len(pkts) != 64 {
		t.Fatalf("only %d mixed packets", len(pkts))
	}
	tb := newPTBatch(t, 64)
	tb.load(t, pkts)
	for _, tunnels := range []bool{true, false} {
		st := &parseStage{tunnels: tunnels}
		n := allocs.Count(100, func() {
			st.Process(tb.b, tb.idx, tb.next)
		})
		if n != 0 {
			t.Errorf("tunnels=%v: %d allocations in 100 batches, want 0", tunnels, n)
		}
	}
}

// TestParseTunnelsOff checks that turning tunnels off only drops tunnel
// fields: the outer view is the same.
func TestParseTunnelsOff(t *testing.T) {
	n := 0
	for _, c := range ptCases(t) {
		on, off := ptParse(t, c.pkt, true), ptParse(t, c.pkt, false)
		if on.Flags&rings.FlagTunnel != 0 {
			n++
		}
		if off.Flags&(rings.FlagTunnel|rings.FlagInnerL4) != 0 || off.Tunnel != 0 || off.InnerL2Off|off.InnerL3Off|off.InnerL4Off != 0 {
			t.Errorf("%s: tunnel fields with tunnels off: %s", c.name, ptFmtMeta(off))
		}
		on.Flags &^= rings.FlagTunnel | rings.FlagInnerL4
		on.Tunnel, on.InnerL2Off, on.InnerL3Off, on.InnerL4Off = 0, 0, 0, 0
		if on != off {
			t.Errorf("%s: outer view differs:\n on %s\noff %s", c.name, ptFmtMeta(on), ptFmtMeta(off))
		}
	}
	if n < 40 {
		t.Errorf("only %d tunnel cases", n)
	}
}

// TestParseFastPathAgrees checks decodeFast against the general decoder
// on every generated case and fixture, each also cut at every length and
// with the header bytes the fast path tests mutated: where the fast path
// takes a packet, it must leave exactly the Meta the general path would.
func TestParseFastPathAgrees(t *testing.T) {
	var pkts [][]byte
	for _, c := range ptCases(t) {
		pkts = append(pkts, c.pkt)
	}
	for _, f := range ptFixtures() {
		pkts = append(pkts, f.pkt)
	}
	var variants [][]byte
	for _, p := range pkts {
		for n := 0; n <= len(p); n++ {
			variants = append(variants, p[:n])
		}
		// Bytes the fast path decides on: ethertype, version/IHL, IPv4
		// total length, flags/fragment offset and protocol, IPv6 payload
		// length and next header, ports, TCP data offset.
		for _, o := range []int{12, 13, 14, 16, 17, 18, 19, 20, 21, 23, 36, 37, 46, 56, 57, 66} {
			for _, v := range []byte{0x00, 0x01, 0x06, 0x11, 0x12, 0x20, 0x2f, 0x40, 0x45, 0x46, 0x50, 0x80, 0xff} {
				if o < len(p) {
					q := append([]byte(nil), p...)
					q[o] = v
					variants = append(variants, q)
				}
			}
		}
	}
	fast := 0
	for _, p := range variants {
		for _, tunnels := range []bool{true, false} {
			if ptFastAgrees(t, p, tunnels) {
				fast++
			}
		}
	}
	if fast < 100 {
		t.Fatalf("fast path took only %d of %d variants", fast, 2*len(variants))
	}
	t.Logf("fast path took %d of %d variants", fast, 2*len(variants))
}

// TestParseFastPathTaken keeps the benchmark's packets (plain UDP/IPv4),
// plain TCP/IPv4, UDP/IPv6 and ICMP on the fast path.
func TestParseFastPathTaken(t *testing.T) {
	for _, p := range [][]byte{
		ptCat(ptEthHdr(etIPv4), ptV4(5, 20+8+18, 0, protoUDP), ptUDPHdr(1, 2, 8+18), make([]byte, 18)),
		ptCat(ptEthHdr(etIPv4), ptV4(5, 20+20, 0x4000, protoTCP), ptTCPHdr(5, 0x12)),
		ptCat(ptEthHdr(etIPv6), ptV6(8, protoUDP), ptUDPHdr(1, 2, 8)),
		ptCat(ptEthHdr(etIPv4), ptV4(5, 20+8, 0, protoICMP), make([]byte, 8)),
	} {
		var m rings.Meta
		if !decodeFast(p, &m, true) {
			t.Fatalf("% x: not on the fast path", p)
		}
	}
}

// ptFastAgrees fails t unless decodeFast leaves what the general decoder
// would (or declines without writing), and reports whether it took p.
func ptFastAgrees(t testing.TB, p []byte, tunnels bool) bool {
	t.Helper()
	got := ptGarbageMeta
	if !decodeFast(p, &got, tunnels) {
		if got != ptGarbageMeta {
			t.Fatalf("% x: fast path declined but wrote Meta %s", p, ptFmtMeta(got))
		}
		return false
	}
	if want := ptGeneral(p, ptGarbageMeta, tunnels); got != want {
		t.Fatalf("% x (tunnels %v):\nfast    %s\ngeneral %s", p, tunnels, ptFmtMeta(got), ptFmtMeta(want))
	}
	return true
}

// ptGeneral is what the general decoder leaves for packet p in a Meta
// that was in before: the reference the fast and inline paths are held to.
func ptGeneral(p []byte, in rings.Meta, tunnels bool) rings.Meta {
	resetParsed(&in)
	in.Class = decodeEthernet(p, &in, tunnels)
	return in
}

// TestParseInlinePathAgrees holds decodeInline to the general decoder over
// random packets around its edges: IPv4 carrying TCP, UDP (some to the
// tunnel ports) or another protocol, with random header bytes where the
// inline path decides, random total lengths, data offsets and frame
// lengths, some cut short by the capture, tunnels on and off. Every packet
// it takes must get what resetParsed and decodeEthernet give, every packet
// it leaves only ClassUnparsed.
func TestParseInlinePathAgrees(t *testing.T) {
	rng := rand.New(rand.NewPCG(16, 9))
	const n = 64
	tb := newPTBatch(t, n)
	pkts := make([][]byte, n)
	cut := make([]bool, n)
	taken, left := 0, 0
	for round := 0; round < 3000; round++ {
		for k := range pkts {
			pkts[k] = ptInlineCandidate(rng)
			cut[k] = rng.IntN(16) == 0
		}
		tunnels := rng.IntN(2) == 0
		tb.load(t, pkts)
		for k := range pkts {
			if cut[k] {
				tb.b.Meta[k].Flags |= rings.FlagCut
			}
		}
		l := decodeInline(tb.b, tb.idx[:n], tunnels)
		for k, p := range pkts {
			got, in := tb.b.Meta[k], ptGarbageMeta
			in.Seq = uint64(k)
			if cut[k] {
				in.Flags |= rings.FlagCut
			}
			if !ptInlineAgrees(t, p, in, got, tunnels) {
				left++
				l--
			} else {
				taken++
			}
		}
		if l != 0 {
			t.Fatalf("decodeInline's count of packets left is off by %d", l)
		}
	}
	if taken < 25000 || left < 25000 {
		t.Fatalf("inline path took %d packets and left %d; want both over 25000", taken, left)
	}
	t.Logf("inline path took %d packets and left %d", taken, left)
}

// ptInlineAgrees fails t unless got, what decodeInline left in a Meta that
// was in before, is what the general decoder gives packet p, or in with
// ClassUnparsed; it reports whether decodeInline took p. It never takes a
// packet the capture cut short.
func ptInlineAgrees(t testing.TB, p []byte, in, got rings.Meta, tunnels bool) bool {
	t.Helper()
	if got.Class == rings.ClassUnparsed {
		want := in
		want.Class = rings.ClassUnparsed
		if got != want {
			t.Fatalf("% x: inline path left the packet but wrote Meta %s", p, ptFmtMeta(got))
		}
		return false
	}
	if in.Flags&rings.FlagCut != 0 {
		t.Fatalf("% x: inline path took a packet the capture cut short", p)
	}
	if want := ptGeneral(p, in, tunnels); got != want {
		t.Fatalf("% x (tunnels %v):\ninline  %s\ngeneral %s", p, tunnels, ptFmtMeta(got), ptFmtMeta(want))
	}
	return true
}

// ptInlineCandidate is a random untagged IPv4 frame near decodeInline's
// edges: mostly TCP or UDP with a well-formed header, then any of the
// bytes the inline path decides on changed, the total length or the
// frame's length off, or the data offset random.
func ptInlineCandidate(rng *rand.Rand) []byte {
	proto := []byte{protoTCP, protoUDP, protoTCP, protoUDP, protoICMP, protoAH, protoGRE}[rng.IntN(7)]
	var l4 []byte
	switch proto {
	case protoTCP:
		doff := 5 + byte(rng.IntN(2)*rng.IntN(11))
		l4 = append(ptTCPHdr(doff, byte(rng.Uint32())), make([]byte, 4*int(doff-5))...)
	case protoUDP:
		dp := []uint16{portVXLAN, portGENEVE, uint16(rng.Uint32()), uint16(rng.Uint32())}[rng.IntN(4)]
		l4 = append(ptUDPHdr(uint16(rng.Uint32()), dp, 12), make([]byte, 12)...)
	default:
		l4 = make([]byte, 20)
	}
	pay := make([]byte, rng.IntN(2)*rng.IntN(30))
	frag := []uint16{0, 0x4000, 0, 0x4000, 0x2000, 0x0001, 0x8000, 0x0100}[rng.IntN(8)]
	tot := ipv4MinHdr + len(l4) + len(pay)
	p := ptCat(ptEthHdr(etIPv4), ptV4(5, tot, frag, proto), l4, pay)
	binary.BigEndian.PutUint32(p[26:], rng.Uint32())
	binary.BigEndian.PutUint32(p[30:], rng.Uint32())
	binary.BigEndian.PutUint16(p[34:], uint16(rng.Uint32()))
	p[22] = byte(rng.Uint32())
	if rng.IntN(4) == 0 {
		p = ptPad(p, 60) // Ethernet padding past the IP packet
	}
	for range rng.IntN(3) {
		switch rng.IntN(5) {
		case 0: // a byte the inline path decides on
			o := []int{12, 13, 14, 15, 16, 17, 20, 21, 23, 36, 37, 46}[rng.IntN(12)]
			if o >= len(p) {
				break
			}
			p[o] = []byte{0, 0x01, 0x06, 0x08, 0x11, 0x12, 0x20, 0x40, 0x45, 0x46, 0x50, 0x86, 0xdd, 0xff, byte(rng.Uint32())}[rng.IntN(15)]
		case 1: // the total length near the frame's and the headers' ends
			binary.BigEndian.PutUint16(p[16:], uint16(len(p)-ethHdrLen-3+rng.IntN(6)))
		case 2:
			binary.BigEndian.PutUint16(p[16:], uint16(ipv4MinHdr+tcpMinHdr-3+rng.IntN(6)))
		case 3: // the frame cut or grown
			if k := len(p) - rng.IntN(8); k >= 0 {
				p = p[:k]
			} else {
				p = append(p, 0)
			}
		case 4: // any data offset
			if len(p) <= 46 {
				break
			}
			p[46] = byte(rng.IntN(16))<<4 | p[46]&0x0f
		}
	}
	return p
}

// TestParseInlinePathTaken keeps the stateful row's packets (60-byte
// frames: TCP with a 20-byte header, UDP with 18 bytes of payload, both
// with DF set) and the parse benchmark's on the inline path.
func TestParseInlinePathTaken(t *testing.T) {
	pkts := [][]byte{
		ptPad(ptCat(ptEthHdr(etIPv4), ptV4(5, 20+20, 0x4000, protoTCP), ptTCPHdr(5, 0x10)), 60),
		ptCat(ptEthHdr(etIPv4), ptV4(5, 20+8+18, 0x4000, protoUDP), ptUDPHdr(1, 2, 18), make([]byte, 18)),
		ptCat(ptEthHdr(etIPv4), ptV4(5, 20+8+18, 0, protoUDP), ptUDPHdr(1, portVXLAN, 18), make([]byte, 18)),
	}
	tb := newPTBatch(t, len(pkts))
	tb.load(t, pkts)
	if l := decodeInline(tb.b, tb.idx, false); l != 0 {
		t.Fatalf("%d of %d packets left", l, len(pkts))
	}
	bb := ptBenchBatch(t)
	if l := decodeInline(bb.b, bb.idx, true); l != 0 {
		t.Fatalf("%d of the benchmark's %d packets left", l, len(bb.idx))
	}
}
