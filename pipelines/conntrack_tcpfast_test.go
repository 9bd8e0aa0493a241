package pipelines

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/warpflow/warpflow/rings"
)

// TestTCPEstablishedAckPath holds tcpEstablishedAck to tcpPacketGeneral:
// random assured ESTABLISHED entries (windows, scales, flags, the last
// segment noted, retransmission counts) and random ACK segments around
// their windows' edges (SACK blocks or not, a zero window or not). Where
// the fast path takes a segment, the general path must give the same
// verdict and timeout and leave the entry byte for byte the same; where
// it declines, it must have changed nothing. One draw in eight is not
// its case (another state, not assured or not replied, a SYN, FIN or RST
// or no ACK): it must decline that.
func TestTCPEstablishedAckPath(t *testing.T) {
	for dir := range uint8(2) {
		if got := tcpConntracks[dir][tcpAckSet][tcpEstablished]; got != tcpEstablished {
			t.Fatalf("direction %d: an ACK moves ESTABLISHED to %s: the fast path's premise is wrong", dir, tcpStateNames[got])
		}
	}
	rnd := rand.New(rand.NewPCG(3, 4))
	to := defaultCTTimeouts()
	near := func(base uint32) uint32 { // a value around an edge, or anywhere
		switch rnd.IntN(4) {
		case 0:
			return rnd.Uint32()
		case 1:
			return base + uint32(rnd.IntN(5)) - 2
		}
		return base + uint32(rnd.IntN(200000)) - 100000
	}
	taken, declined, notCase := 0, 0, 0
	for it := range 300_000 {
		var en ctEntry
		en.state = tcpEstablished
		en.status = ctStUsed | ctStSeenReply | ctStAssured
		for d := range 2 {
			base := rnd.Uint32()
			sd := &en.seen[d]
			sd.end, sd.maxend = base, base+uint32(rnd.IntN(1<<20))
			if rnd.IntN(4) == 0 {
				sd.maxend = base + uint32(rnd.IntN(4)) // at the edge
			}
			sd.maxwin = uint32(rnd.IntN(1 << 20))
			if rnd.IntN(8) == 0 {
				sd.maxwin = 0
			}
			sd.maxack = near(base)
			en.dflags[d] = uint8(rnd.IntN(256))
			en.setWscale(uint8(d), uint8(rnd.IntN(15)))
		}
		en.tcpLast = uint8(rnd.IntN(256))
		en.lastSeq, en.lastAck, en.lastEnd, en.lastWin = rnd.Uint32(), rnd.Uint32(), rnd.Uint32(), uint16(rnd.Uint32())
		dir := uint8(rnd.IntN(2))
		snd, rcv := en.seen[dir], en.seen[dir^1]
		var seg tcpSeg
		seg.flags = thACK | [4]uint8{0, thPSH, thECE, thCWR | thURG}[rnd.IntN(4)]
		seg.seq = near(snd.end)
		seg.ack = near(rcv.end)
		seg.win = uint16(rnd.Uint32())
		if rnd.IntN(6) == 0 {
			seg.win = 0
		}
		seg.payload = uint32(rnd.IntN(1500))
		hdr := make([]byte, 20, 60)
		if rnd.IntN(3) == 0 { // a SACK block past the ack, sometimes
			right := seg.ack + uint32(rnd.IntN(100000))
			hdr = append(hdr, 1, 1, 5, 10, 0, 0, 0, 0, 0, 0, 0, 0)
			binary.BigEndian.PutUint32(hdr[24:], right-100)
			binary.BigEndian.PutUint32(hdr[28:], right)
		}
		seg.hdr = hdr
		if rnd.IntN(4) == 0 { // a repeat of the last segment
			en.setLast(en.lastIndex(), dir)
			en.lastSeq, en.lastAck, en.lastEnd, en.lastWin = seg.seq, seg.ack, seg.seq+seg.payload, seg.win
		}
		other := rnd.IntN(8) == 0
		if other {
			switch rnd.IntN(4) {
			case 0:
				en.state = [...]uint8{tcpNone, tcpSynSent, tcpSynRecv, tcpFinWait, tcpCloseWait, tcpLastAck, tcpTimeWait, tcpClose, tcpSynSent2}[rnd.IntN(9)]
			case 1:
				en.status &^= [...]uint8{ctStAssured, ctStSeenReply}[rnd.IntN(2)]
			case 2:
				seg.flags |= [...]uint8{thSYN, thFIN, thRST}[rnd.IntN(3)]
			default:
				seg.flags &^= thACK
			}
		}
		before := en
		fast := en
		ft, ok := tcpEstablishedAck(&fast, dir, &seg, &to)
		if other {
			if ok || fast != before {
				t.Fatalf("iteration %d: not its case (state %d, status %#x, flags %#x) but taken or changed", it, en.state, en.status, seg.flags)
			}
			notCase++
			continue
		}
		if !ok {
			if fast != before {
				t.Fatalf("iteration %d: declined but changed the entry\nbefore %+v\nafter  %+v", it, before, fast)
			}
			declined++
			continue
		}
		taken++
		gen := en
		gv, gt := tcpPacketGeneral(&gen, dir, &seg, &to)
		if gv != tcpAccept || gt != ft || gen != fast {
			t.Fatalf("iteration %d (dir %d, seg %+v): fast accept/%d\n%+v\ngeneral %d/%d\n%+v", it, dir, seg, ft, fast, gv, gt, gen)
		}
	}
	if taken < 30_000 || declined < 30_000 || notCase < 30_000 {
		t.Fatalf("the draw does not cover both paths: %d taken, %d declined, %d not its case", taken, declined, notCase)
	}
	t.Logf("%d segments taken by the fast path, %d declined, %d not its case", taken, declined, notCase)
}

// TestFindPacketMatch holds findPacket's in-place match of the entry the
// prefetching passes named to tupleIs: random IPv4 and IPv6 entries
// (translated or not, NAT bytes random), asked about in either direction
// with the packet's tuple that direction's, or that tuple with one field
// changed. The entry is in no index slot, so a packet the match rejects
// is found by nothing.
func TestFindPacketMatch(t *testing.T) {
	s := stMustBuild(t, conntrackKind, `{}`).NewInstance().(*ctStage)
	tab := s.table()
	tab.advance(1000)
	rnd := rand.New(rand.NewPCG(5, 6))
	found := 0
	for range 200_000 {
		en := &tab.ent[0]
		*en = ctEntry{}
		for i := range 16 {
			en.src[i], en.dst[i] = byte(rnd.IntN(3)), byte(rnd.IntN(3)) // few values: collisions
		}
		en.sport, en.dport = uint16(rnd.IntN(3)), uint16(rnd.IntN(3))
		en.proto = [2]uint8{6, 17}[rnd.IntN(2)]
		en.status = ctStUsed | uint8(rnd.IntN(256))&(ctStSNAT|ctStDNAT|ctStTentative)
		if rnd.IntN(8) == 0 {
			en.status |= ctStV6
		}
		if rnd.IntN(16) == 0 {
			en.status &^= ctStUsed
		}
		if rnd.IntN(16) == 0 {
			en.zone = 1
		}
		en.expires = tab.now + 1000
		dir := uint8(rnd.IntN(2))
		var k ctTuple
		tab.tupleOf(en, dir, &k)
		k.v6, k.zone = false, 0
		switch rnd.IntN(10) { // half the draws unchanged
		case 1:
			k.src[rnd.IntN(4)] ^= 1
		case 2:
			k.dst[rnd.IntN(4)] ^= 1
		case 3:
			k.sport ^= 1
		case 4:
			k.dport ^= 1
		case 5:
			k.proto ^= 6 ^ 17
		}
		var m rings.Meta
		m.Flags = rings.FlagIPv4 | rings.FlagL4
		m.IPProto, m.SrcPort, m.DstPort = k.proto, k.sport, k.dport
		copy(m.SrcIP[:4], k.src[:4])
		copy(m.DstIP[:4], k.dst[:4])
		s.h, s.slot = 0, 1<<1|uint32(dir)
		want := en.status&ctStUsed != 0 && tab.tupleIs(en, dir, &k)
		gotEn, e, gotDir, ok := s.findPacket(&m)
		if ok != want || ok && (gotEn != en || e != 0 || gotDir != dir) {
			t.Fatalf("entry %+v direction %d, packet %+v: found %v (entry %d direction %d), want %v", *en, dir, k, ok, e, gotDir, want)
		}
		if ok {
			found++
		}
	}
	if found < 50_000 {
		t.Fatalf("only %d of 200000 found: the test draws too few matches", found)
	}
}
