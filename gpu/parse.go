package gpu

import (
	"encoding/binary"

	"github.com/warpflow/warpflow/pipelines"
)

// Key dimensions and sentinels of pipelines' classifier key
// (filter_classify.go), as kernel.cu spells them.
const (
	dL3 = iota
	dSrcHi
	dSrcLo
	dDstHi
	dDstLo
	dSport
	dDport
	dVLAN
	dClass
	dTCP
	dFrag
)

const (
	noPort = 65536
	noVLAN = 4096
	noTCP  = 256
)

// parseCommon is kernel.cu's parse in Go, line for line: the key of a
// packet in the parser's common case (Ethernet, up to 2 VLAN tags, IPv4
// without options or fragmentation or IPv6 without extension headers,
// lengths consistent; TCP, UDP, ICMP, ICMPv6 or an undecoded protocol),
// or false for every other packet, which the CPU path classifies. have is
// how many bytes of p the kernel loaded (its window). The emulation runs
// it; TestParseCommonAgrees checks it against the parse stage.
func parseCommon(p []byte, n, have int, k *pipelines.FilterKey) bool {
	lim := min(n, have, len(p))
	if lim < 14 {
		return false
	}
	be16 := func(o int) uint64 { return uint64(binary.BigEndian.Uint16(p[o:])) }
	et := be16(12)
	off, nv := 14, 0
	vlan := uint64(noVLAN)
	for et == 0x8100 || et == 0x88a8 || et == 0x9100 {
		if nv == 2 || off+4 > lim {
			return false
		}
		if nv == 0 {
			vlan = be16(off) & 0xfff
		}
		nv++
		et = be16(off + 2)
		off += 4
	}
	var l4, end int
	var proto, fam uint64
	switch et {
	case 0x0800:
		if off+20 > lim {
			return false
		}
		h := p[off:]
		tot := int(binary.BigEndian.Uint16(h[2:]))
		if h[0] != 0x45 || binary.BigEndian.Uint16(h[6:])&0x3fff != 0 || tot < 20 || off+tot > n {
			return false
		}
		proto = uint64(h[9])
		if proto == 51 {
			return false
		}
		fam = 1
		k[dSrcHi] = uint64(binary.BigEndian.Uint32(h[12:])) << 32
		k[dDstHi] = uint64(binary.BigEndian.Uint32(h[16:])) << 32
		k[dSrcLo], k[dDstLo] = 0, 0
		l4, end = off+20, off+tot
	case 0x86dd:
		if off+40 > lim {
			return false
		}
		h := p[off:]
		end = off + 40 + int(binary.BigEndian.Uint16(h[4:]))
		proto = uint64(h[6])
		if h[0]>>4 != 6 || end > n {
			return false
		}
		switch proto {
		case 0, 43, 44, 51, 60:
			return false
		}
		fam = 2
		k[dSrcHi] = binary.BigEndian.Uint64(h[8:])
		k[dSrcLo] = binary.BigEndian.Uint64(h[16:])
		k[dDstHi] = binary.BigEndian.Uint64(h[24:])
		k[dDstLo] = binary.BigEndian.Uint64(h[32:])
		l4 = off + 40
	default:
		return false
	}
	k[dL3] = fam<<9 | proto
	k[dSport], k[dDport], k[dTCP] = noPort, noPort, noTCP
	k[dVLAN], k[dClass], k[dFrag] = vlan, 1, 0
	switch proto {
	case 6:
		if l4+20 > end || l4+20 > lim {
			return false
		}
		doff := int(p[l4+12]>>4) * 4
		if doff < 20 || l4+doff > end {
			return false
		}
		k[dSport], k[dDport], k[dTCP] = be16(l4), be16(l4+2), uint64(p[l4+13])
	case 17:
		if l4+8 > end || l4+4 > lim {
			return false
		}
		k[dSport], k[dDport] = be16(l4), be16(l4+2)
	case 1:
		if l4+8 > end {
			return false
		}
	case 58:
		if l4+4 > end || l4+1 > lim {
			return false
		}
		if (p[l4] == 128 || p[l4] == 129) && l4+8 > end {
			return false
		}
	case 132, 47:
		return false
	}
	return true
}

// window is WF_WIN in kernel.cu: the header bytes the kernel loads from
// the 16-byte boundary at or below a packet's first byte.
const window = 128

// haveBytes is the kernel's "have" for a packet at addr: the loaded
// window's bytes from the packet's first byte, capped at the frame's end.
func haveBytes(addr, frameMask, arenaLen uint64) int {
	start := addr &^ 15
	fend := min((addr|frameMask)+1, arenaLen)
	return int(min(fend-start, window)) - int(addr-start)
}
