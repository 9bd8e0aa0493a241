package pipelines

import "encoding/binary"

// TCP connection tracking: a port of Linux's nf_conntrack_proto_tcp.c
// (the 6.1 series, which Debian 12 runs, and unchanged in these parts
// through 6.18): the same state table, the same window tracking
// (tcp_in_window, Guido van Rooij's "Real Stateful TCP Packet Filtering
// in IP Filter"), the same handling of ignored packets, reopened
// connections and RSTs, and the same timeouts. Differences, all stated
// in CONFIG.md: no SYN proxy, no NAT sequence-number adjustment (no
// helpers rewrite payloads), nf_conntrack_tcp_be_liberal and
// ignore_invalid_rst are fixed at their defaults (0), and loose pickup
// (nf_conntrack_tcp_loose) defaults to off here where Linux defaults to
// on.

// TCP states, in Linux's order (enum tcp_conntrack).
const (
	tcpNone uint8 = iota
	tcpSynSent
	tcpSynRecv
	tcpEstablished
	tcpFinWait
	tcpCloseWait
	tcpLastAck
	tcpTimeWait
	tcpClose
	tcpSynSent2
	tcpMax    // invalid transition (sIV)
	tcpIgnore // ignored packet (sIG)
	tcpRetrans
	tcpUnack
	tcpTimeouts // the timeout table's length
)

var tcpStateNames = [...]string{
	tcpNone: "NONE", tcpSynSent: "SYN_SENT", tcpSynRecv: "SYN_RECV", tcpEstablished: "ESTABLISHED",
	tcpFinWait: "FIN_WAIT", tcpCloseWait: "CLOSE_WAIT", tcpLastAck: "LAST_ACK", tcpTimeWait: "TIME_WAIT",
	tcpClose: "CLOSE", tcpSynSent2: "SYN_SENT2",
}

// Packet classes (get_conntrack_index).
const (
	tcpSynSet uint8 = iota
	tcpSynAckSet
	tcpFinSet
	tcpAckSet
	tcpRstSet
	tcpNoneSet
)

// TCP header flag bits.
const (
	thFIN = 0x01
	thSYN = 0x02
	thRST = 0x04
	thPSH = 0x08
	thACK = 0x10
	thURG = 0x20
	thECE = 0x40
	thCWR = 0x80
)

// Per-direction flags (ip_ct_tcp_state.flags) and last_flags bits.
const (
	tcpFlWindowScale = 0x01
	tcpFlSackPerm    = 0x02
	tcpFlCloseInit   = 0x04
	tcpFlBeLiberal   = 0x08
	tcpFlDataUnacked = 0x10
	tcpFlMaxackSet   = 0x20
	tcpFlChallenge   = 0x40 // IP_CT_EXP_CHALLENGE_ACK (last_flags)
	tcpFlSimOpen     = 0x80 // IP_CT_TCP_SIMULTANEOUS_OPEN (last_flags)
)

// tcpNumIndex and tcpNumStates are the table's dimensions: the segment
// kinds (tcpSynSet..tcpNoneSet) and the states an entry can be in.
const (
	tcpNumIndex  = int(tcpNoneSet) + 1
	tcpNumStates = int(tcpMax)
)

// tcpConntracks is Linux's tcp_conntracks[dir][index][state].
var tcpConntracks = func() (t [2][tcpNumIndex][tcpNumStates]uint8) {
	const (
		sNO, sSS, sSR, sES, sFW, sCW, sLA, sTW, sCL, sS2, sIV, sIG = tcpNone, tcpSynSent, tcpSynRecv, tcpEstablished,
			tcpFinWait, tcpCloseWait, tcpLastAck, tcpTimeWait, tcpClose, tcpSynSent2, tcpMax, tcpIgnore
	)
	_ = sNO
	t[0] = [6][10]uint8{
		/*          sNO, sSS, sSR, sES, sFW, sCW, sLA, sTW, sCL, sS2 */
		/*syn*/ {sSS, sSS, sIG, sIG, sIG, sIG, sIG, sSS, sSS, sS2},
		/*synack*/ {sIV, sIV, sSR, sIV, sIV, sIV, sIV, sIV, sIV, sSR},
		/*fin*/ {sIV, sIV, sFW, sFW, sLA, sLA, sLA, sTW, sCL, sIV},
		/*ack*/ {sES, sIV, sES, sES, sCW, sCW, sTW, sTW, sCL, sIV},
		/*rst*/ {sIV, sCL, sCL, sCL, sCL, sCL, sCL, sCL, sCL, sCL},
		/*none*/ {sIV, sIV, sIV, sIV, sIV, sIV, sIV, sIV, sIV, sIV},
	}
	t[1] = [6][10]uint8{
		/*          sNO, sSS, sSR, sES, sFW, sCW, sLA, sTW, sCL, sS2 */
		/*syn*/ {sIV, sS2, sIV, sIV, sIV, sIV, sIV, sSS, sIV, sS2},
		/*synack*/ {sIV, sSR, sIG, sIG, sIG, sIG, sIG, sIG, sIG, sSR},
		/*fin*/ {sIV, sIV, sFW, sFW, sLA, sLA, sLA, sTW, sCL, sIV},
		/*ack*/ {sIV, sIG, sSR, sES, sCW, sCW, sTW, sTW, sCL, sIG},
		/*rst*/ {sIV, sCL, sCL, sCL, sCL, sCL, sCL, sCL, sCL, sCL},
		/*none*/ {sIV, sIV, sIV, sIV, sIV, sIV, sIV, sIV, sIV, sIV},
	}
	return t
}()

// tcpValidFlags is Linux's tcp_valid_flags over FIN|SYN|RST|ACK|URG (PSH,
// ECE and CWR masked off).
var tcpValidFlags = func() (v [64]bool) {
	for _, f := range []int{thSYN, thSYN | thURG, thSYN | thACK, thRST, thRST | thACK,
		thFIN | thACK, thFIN | thACK | thURG, thACK, thACK | thURG} {
		v[f] = true
	}
	return v
}()

// tcpMaxAckWinConst is Linux's MAXACKWINCONST.
const tcpMaxAckWinConst = 66000

// tcpMaxRetrans is nf_conntrack_tcp_max_retrans.
const tcpMaxRetrans = 3

func before(a, b uint32) bool { return int32(a-b) < 0 }
func after(a, b uint32) bool  { return int32(b-a) < 0 }

// tcpSeg is what the tracker needs of one TCP segment.
type tcpSeg struct {
	hdr     []byte // the TCP header, options included (doff*4 bytes)
	flags   uint8
	seq     uint32
	ack     uint32
	win     uint16
	payload uint32 // bytes after the TCP header, by the IP length
}

// end is segment_seq_plus_len.
func (s *tcpSeg) end() uint32 {
	e := s.seq + s.payload
	if s.flags&thSYN != 0 {
		e++
	}
	if s.flags&thFIN != 0 {
		e++
	}
	return e
}

// tcpIndex is get_conntrack_index.
func tcpIndex(f uint8) uint8 {
	switch {
	case f&thRST != 0:
		return tcpRstSet
	case f&thSYN != 0:
		if f&thACK != 0 {
			return tcpSynAckSet
		}
		return tcpSynSet
	case f&thFIN != 0:
		return tcpFinSet
	case f&thACK != 0:
		return tcpAckSet
	}
	return tcpNoneSet
}

// tcpOptions reads the window scale and SACK-permitted options of a SYN
// into a direction's scale and flags (Linux tcp_options).
func tcpOptions(hdr []byte, scale, flags *uint8) {
	*scale = 0
	*flags &^= tcpFlWindowScale | tcpFlSackPerm
	opts := hdr[20:]
	for len(opts) > 0 {
		switch kind := opts[0]; kind {
		case 0: // end of options
			return
		case 1: // nop
			opts = opts[1:]
			continue
		}
		if len(opts) < 2 {
			return
		}
		l := int(opts[1])
		if l < 2 || l > len(opts) {
			return
		}
		switch {
		case opts[0] == 4 && l == 2:
			*flags |= tcpFlSackPerm
		case opts[0] == 3 && l == 3:
			*flags |= tcpFlWindowScale
			*scale = min(opts[2], 14)
		}
		opts = opts[l:]
	}
}

// tcpSack raises *sack to the highest right edge of the SACK blocks
// (Linux tcp_sack).
func tcpSack(hdr []byte, sack *uint32) {
	opts := hdr[20:]
	for len(opts) > 0 {
		switch opts[0] {
		case 0:
			return
		case 1:
			opts = opts[1:]
			continue
		}
		if len(opts) < 2 {
			return
		}
		l := int(opts[1])
		if l < 2 || l > len(opts) {
			return
		}
		if opts[0] == 5 && l >= 10 && (l-2)%8 == 0 {
			for b := 2; b+8 <= l; b += 8 {
				if e := binary.BigEndian.Uint32(opts[b+4:]); after(e, *sack) {
					*sack = e
				}
			}
		}
		opts = opts[l:]
	}
}

// tcpNew is Linux's tcp_new: it sets up a new entry's tracking from the
// segment that creates it, or reports false when the segment cannot start
// a flow (not a SYN, with loose pickup off).
func tcpNew(en *ctEntry, s *tcpSeg, loose bool) bool {
	ns := tcpConntracks[0][tcpIndex(s.flags)][tcpNone]
	if ns >= tcpMax {
		return false
	}
	en.seen = [2]tcpDir{}
	en.wscales, en.dflags = 0, [2]uint8{}
	en.lastWin, en.lastFlags = 0, 0 // last_wscale too (retrans: tcpLast, below)
	en.lastEnd, en.lastSeq, en.lastAck = 0, 0, 0
	d := &en.seen[0]
	if ns == tcpSynSent {
		d.end = s.end()
		d.maxwin = max(uint32(s.win), 1)
		d.maxend = d.end
		var scale uint8
		tcpOptions(s.hdr, &scale, &en.dflags[0])
		en.setWscale(0, scale)
	} else {
		if !loose {
			return false
		}
		d.end = s.end()
		d.maxwin = max(uint32(s.win), 1)
		d.maxend = d.end + d.maxwin
		en.dflags[0] = tcpFlSackPerm | tcpFlBeLiberal
		en.dflags[1] = tcpFlSackPerm | tcpFlBeLiberal
	}
	en.state = tcpNone
	en.tcpLast = tcpNoneSet // last_index = TCP_NONE_SET, last_dir 0
	return true
}

func (en *ctEntry) lastIndex() uint8 { return en.tcpLast & 7 }
func (en *ctEntry) lastDir() uint8   { return en.tcpLast >> 3 & 1 }
func (en *ctEntry) setLast(index, dir uint8) {
	en.tcpLast = en.tcpLast&0xf0 | index | dir<<3 // retrans kept
}

// tcpVerdict is what tcpPacketGeneral decided.
type tcpVerdict uint8

const (
	tcpAccept       tcpVerdict = iota // state updated, timeout set
	tcpIgnored                        // accepted, no state change (NF_ACCEPT from the ignore paths)
	tcpKill                           // accepted, and the entry is to go now (nf_ct_kill_acct)
	tcpReopen                         // kill the entry and look the packet up again as new (-NF_REPEAT)
	tcpInvalidState                   // invalid transition
	tcpInvalidRST                     // RST below the other side's max ack
	tcpOutOfWindow                    // tcp_in_window: invalid
)

// tcpInitSender is tcp_init_sender: a SYN or SYN/ACK (re)initialises its
// direction d.
func tcpInitSender(en *ctEntry, d uint8, s *tcpSeg, end uint32) {
	sender := &en.seen[d]
	sender.end, sender.maxend = end, end
	sender.maxwin = max(uint32(s.win), 1)
	var scale uint8
	tcpOptions(s.hdr, &scale, &en.dflags[d])
	en.setWscale(d, scale)
	// RFC 1323: both sides must send the window scale option to enable
	// window scaling in either direction.
	if en.dflags[d]&tcpFlWindowScale == 0 || en.dflags[d^1]&tcpFlWindowScale == 0 {
		en.wscales = 0 // both directions
	}
}

// tcpInWindowResult is tcp_in_window's answer.
type tcpInWindowResult uint8

const (
	tcpWinAccept tcpInWindowResult = iota
	tcpWinIgnore
	tcpWinInvalid
)

// tcpInWindow is Linux's tcp_in_window (no NAT sequence offsets: nothing
// here resizes TCP payloads).
func tcpInWindow(en *ctEntry, dir, index uint8, s *tcpSeg) tcpInWindowResult {
	dir &= 1 // 0 or 1 already: the mask lets the compiler drop the bounds checks
	sender, receiver := &en.seen[dir], &en.seen[dir^1]
	seq := s.seq
	ack := s.ack
	sack := ack
	win := uint32(s.win)
	end := s.end()
	syn, hasAck, rst := s.flags&thSYN != 0, s.flags&thACK != 0, s.flags&thRST != 0

	if en.dflags[dir^1]&tcpFlSackPerm != 0 {
		tcpSack(s.hdr, &sack)
	}

	if sender.maxwin == 0 {
		if syn {
			tcpInitSender(en, dir, s, end)
			if !hasAck {
				return tcpWinAccept // simultaneous open
			}
		} else {
			// Mid-connection: its history is lost to us; use the packet.
			sender.end = end
			swin := win << en.wscale(dir)
			sender.maxwin = max(swin, 1)
			sender.maxend = end + sender.maxwin
			if receiver.maxwin == 0 {
				receiver.end, receiver.maxend = sack, sack
			} else if sack == receiver.end+1 {
				receiver.end++ // likely a reply to a keepalive
			}
		}
	} else if syn && after(end, sender.end) && (en.state == tcpSynSent || en.state == tcpSynRecv) {
		// RFC 793: a reinitialised TCP uses larger sequence numbers;
		// re-init this direction like for the first SYN(/ACK).
		tcpInitSender(en, dir, s, end)
		if dir == 1 && !hasAck {
			return tcpWinAccept
		}
	}

	if !hasAck {
		ack, sack = receiver.end, receiver.end
	} else if rst && ack == 0 {
		// Broken stacks set ACK in RSTs with a zero ack value.
		ack, sack = receiver.end, receiver.end
	}

	if rst && seq == 0 && en.state == tcpSynSent {
		seq, end = sender.end, sender.end // RST answering a SYN
	}

	liberal := en.dflags[dir]&tcpFlBeLiberal != 0
	verdict := func(r tcpInWindowResult) tcpInWindowResult {
		if liberal {
			return tcpWinAccept
		}
		return r
	}
	maxAckWin := max(sender.maxwin, tcpMaxAckWinConst)

	if !before(seq, sender.maxend+1) {
		overshot := end - sender.maxend + 1
		ackOK := after(sack, receiver.end-maxAckWin-1)
		inRecvWin := receiver.maxwin != 0 && after(end, sender.end-receiver.maxwin-1)
		if inRecvWin && ackOK && overshot <= receiver.maxwin && before(sack, receiver.end+1) {
			// A TCP that sends more than the receive window allows:
			// note the data so that its ACK is in window later.
			sender.end = end
			en.dflags[dir] |= tcpFlDataUnacked
			return verdict(tcpWinIgnore)
		}
		return verdict(tcpWinInvalid) // SEQ over the upper bound
	}
	if !before(sack, receiver.end+1) {
		return verdict(tcpWinInvalid) // ACK over the upper bound (acked data not seen yet)
	}
	inRecvWin := receiver.maxwin == 0 || after(end, sender.end-receiver.maxwin-1)
	if !inRecvWin {
		return verdict(tcpWinIgnore) // SEQ under the lower bound (retransmitted, already acked)
	}
	if !after(sack, receiver.end-maxAckWin-1) {
		return verdict(tcpWinIgnore) // ACK under the lower bound (overly delayed)
	}

	if !syn {
		win <<= en.wscale(dir)
	}
	tcpWindowUpdate(en, dir, s, seq, ack, sack, end, win, hasAck, index == tcpAckSet)
	return tcpWinAccept
}

// tcpWindowUpdate is tcp_in_window's bookkeeping for a segment it
// accepts (win already scaled): the sender's window and ends, the
// receiver's, the data-unacknowledged flags and, for an ACK-only
// segment, the last segment noted for retransmission counting. The one
// copy of it, for tcpInWindow and tcpEstablishedAck.
func tcpWindowUpdate(en *ctEntry, dir uint8, s *tcpSeg, seq, ack, sack, end, win uint32, hasAck, ackOnly bool) {
	dir &= 1
	sender, receiver := &en.seen[dir], &en.seen[dir^1]
	swin := win + (sack - ack)
	if sender.maxwin < swin {
		sender.maxwin = swin
	}
	if after(end, sender.end) {
		sender.end = end
		en.dflags[dir] |= tcpFlDataUnacked
	}
	if hasAck {
		if en.dflags[dir]&tcpFlMaxackSet == 0 {
			sender.maxack = ack
			en.dflags[dir] |= tcpFlMaxackSet
		} else if after(ack, sender.maxack) {
			sender.maxack = ack
		}
	}
	if receiver.maxwin != 0 && after(end, sender.maxend) {
		receiver.maxwin += end - sender.maxend
	}
	if after(sack+win, receiver.maxend-1) {
		receiver.maxend = sack + win
		if win == 0 {
			receiver.maxend++
		}
	}
	if ack == receiver.end {
		en.dflags[dir^1] &^= tcpFlDataUnacked
	}
	if ackOnly {
		if en.lastDir() == dir && en.lastSeq == seq && en.lastAck == ack && en.lastEnd == end && en.lastWin == s.win {
			en.setRetrans(en.retrans() + 1) // held at 15
		} else {
			en.setLast(en.lastIndex(), dir)
			en.lastSeq, en.lastAck, en.lastEnd, en.lastWin = seq, ack, end, s.win
			en.setRetrans(0)
		}
	}
}

// tcpTimeout is the state machine's choice of timeout for an accepted
// segment of kind index that left the entry in state newState.
// Small enough to inline (each timeout read once), so that the ACK
// path's call, with the segment kind and the state constant, folds.
func tcpTimeout(en *ctEntry, index, newState uint8, to *ctTimeouts) uint32 {
	t, retrans := to.tcp[newState], to.tcp[tcpRetrans]
	switch {
	case en.retrans() >= tcpMaxRetrans && t > retrans:
		return retrans
	case index == tcpRstSet:
		return to.tcp[tcpClose]
	case (en.dflags[0]|en.dflags[1])&tcpFlDataUnacked != 0 && t > to.tcp[tcpUnack]:
		return to.tcp[tcpUnack]
	case en.lastWin == 0 && t > retrans:
		return retrans
	}
	return t
}

// tcpEstablishedAck is tcpPacketGeneral for the segment most of a
// connection's are: an ACK without SYN, FIN or RST of an assured,
// ESTABLISHED flow (ESTABLISHED stays, tcpConntracks says, in both
// directions), in window. It is tcp_in_window with syn, rst and !ack
// known false and the state machine's tail with the state known, about
// a third of the instructions (TestTCPEstablishedAckPath holds it to the
// general path). It reports false, having changed nothing, for any other
// segment or entry, for a segment that fails any of the window's
// checks, or whose sender has no window yet: the general path then
// decides (ctStage.tcp calls the two in turn).
func tcpEstablishedAck(en *ctEntry, dir uint8, s *tcpSeg, to *ctTimeouts) (timeout uint32, ok bool) {
	if en.state != tcpEstablished || s.flags&(thSYN|thFIN|thRST|thACK) != thACK ||
		en.status&(ctStSeenReply|ctStAssured) != ctStSeenReply|ctStAssured {
		return 0, false
	}
	dir &= 1 // 0 or 1 already: the mask lets the compiler drop the bounds checks
	sender, receiver := &en.seen[dir], &en.seen[dir^1]
	if sender.maxwin == 0 {
		return 0, false
	}
	seq, ack := s.seq, s.ack
	sack := ack
	end := seq + s.payload
	if en.dflags[dir^1]&tcpFlSackPerm != 0 {
		tcpSack(s.hdr, &sack)
	}
	maxAckWin := max(sender.maxwin, tcpMaxAckWinConst)
	if !before(seq, sender.maxend+1) || !before(sack, receiver.end+1) ||
		receiver.maxwin != 0 && !after(end, sender.end-receiver.maxwin-1) ||
		!after(sack, receiver.end-maxAckWin-1) {
		return 0, false
	}
	win := uint32(s.win) << en.wscale(dir)
	tcpWindowUpdate(en, dir, s, seq, ack, sack, end, win, true, true)
	// The state machine's tail (tcpPacketGeneral after inWindow).
	en.setLast(tcpAckSet, dir)
	return tcpTimeout(en, tcpAckSet, tcpEstablished, to), true
}

// tcpPacketGeneral is Linux's nf_conntrack_tcp_packet after the checks
// and tcp_new: it runs the state machine for a segment of an entry in
// direction dir and, when it accepts, returns the new timeout in ms (for
// tcpOutOfWindow a non-zero timeout is a cap to lower the expiry to).
// The entry's seen-reply and assured bits are as before this packet.
// Any segment: tcpEstablishedAck takes the common one faster.
func tcpPacketGeneral(en *ctEntry, dir uint8, s *tcpSeg, to *ctTimeouts) (v tcpVerdict, timeout uint32) {
	oldState := en.state
	index := tcpIndex(s.flags)
	newState := tcpConntracks[dir&1][min(index, uint8(tcpNumIndex-1))][min(oldState, uint8(tcpNumStates-1))] // clamped: no bounds checks
	seenReply := en.status&ctStSeenReply != 0
	assured := en.status&ctStAssured != 0

	switch newState {
	case tcpSynSent:
		if oldState < tcpTimeWait {
			break
		}
		if (en.dflags[dir]|en.dflags[dir^1])&tcpFlCloseInit != 0 ||
			(en.lastDir() == dir && en.lastIndex() == tcpRstSet) {
			return tcpReopen, 0
		}
		fallthrough
	case tcpIgnore:
		if index == tcpSynAckSet && en.lastIndex() == tcpSynSet && en.lastDir() != dir && s.ack == en.lastEnd {
			// This SYN/ACK acknowledges a SYN we ignored: client and
			// server are in sync and we are not; sync from what we
			// noted.
			ld := en.lastDir()
			oldState, newState = tcpSynSent, tcpSynRecv
			d := &en.seen[ld]
			d.end, d.maxend = en.lastEnd, en.lastEnd
			d.maxwin = max(uint32(en.lastWin), 1)
			en.setWscale(ld, en.lastWscale())
			en.lastFlags &^= tcpFlChallenge
			en.dflags[ld] = en.lastFlags &^ tcpLastWscaleBits
			en.seen[dir], en.dflags[dir] = tcpDir{}, 0
			en.setWscale(dir, 0)
			break
		}
		en.setLast(index, dir)
		en.lastSeq = s.seq
		en.lastEnd = s.end()
		en.lastWin = s.win
		if index == tcpSynSet && dir == 0 {
			var scale, flags uint8
			en.lastFlags = 0 // last_wscale too
			tcpOptions(s.hdr, &scale, &flags)
			if flags&tcpFlWindowScale != 0 {
				en.lastFlags |= tcpFlWindowScale
				en.setLastWscale(scale)
			}
			if flags&tcpFlSackPerm != 0 {
				en.lastFlags |= tcpFlSackPerm
			}
			if oldState == tcpLastAck {
				en.lastFlags |= tcpFlChallenge
			}
		}
		if oldState == tcpSynSent && index == tcpAckSet && dir == 1 {
			en.lastAck = s.ack // a possible challenge ACK answering the SYN
		}
		return tcpIgnored, 0
	case tcpMax:
		return tcpInvalidState, 0
	case tcpTimeWait:
		if oldState == tcpLastAck && index == tcpAckSet && en.lastDir() != dir &&
			en.lastIndex() == tcpSynSet && en.lastFlags&tcpFlChallenge != 0 {
			en.lastFlags &^= tcpFlChallenge // an RFC 5961 challenge ACK
			return tcpIgnored, 0
		}
	case tcpSynSent2:
		en.lastFlags |= tcpFlSimOpen
	case tcpSynRecv:
		if dir == 1 && index == tcpAckSet && en.lastFlags&tcpFlSimOpen != 0 {
			newState = tcpEstablished
		}
	case tcpClose:
		if index != tcpRstSet {
			break
		}
		if tcpCanEarlyDrop(en) {
			goto inWindow
		}
		if en.dflags[dir^1]&tcpFlMaxackSet != 0 && en.lastIndex() != tcpSynSet {
			seq := s.seq
			established := en.state == tcpEstablished
			if seq == 0 && !established {
				break
			}
			if before(seq, en.seen[dir^1].maxack) {
				return tcpInvalidRST, 0
			}
			if !established || seq == en.seen[dir^1].maxack {
				break
			}
			if en.lastIndex() == tcpAckSet && en.lastDir() == dir && seq == en.lastEnd {
				break // an RST ending a train of segments
			}
			newState = oldState // inexact RST: keep the state for a challenge ACK
		}
		if ((seenReply && en.lastIndex() == tcpSynSet) || (!assured && en.lastIndex() == tcpAckSet)) &&
			s.ack == en.lastEnd {
			goto inWindow // RST to a SYN or ACK we let through
		}
		if oldState == tcpSynSent && en.lastIndex() == tcpAckSet && en.lastDir() == 1 && s.seq == en.lastAck {
			goto inWindow // RST answering a challenge ACK we let through
		}
	}

	switch tcpInWindow(en, dir, index, s) {
	case tcpWinIgnore:
		return tcpIgnored, 0
	case tcpWinInvalid:
		if tcpHandleInvalid(en, dir, index) {
			return tcpOutOfWindow, to.tcp[tcpUnack]
		}
		return tcpOutOfWindow, 0
	}

inWindow:
	en.setLast(index, dir)
	en.state = newState
	if oldState != newState && newState == tcpFinWait {
		en.dflags[dir] |= tcpFlCloseInit
	}
	timeout = tcpTimeout(en, index, newState, to)
	if !seenReply {
		if s.flags&thRST != 0 {
			return tcpKill, 0 // the only reply was a RST: no connection
		}
		if index == tcpSynSet && oldState == tcpSynSent {
			return tcpIgnored, 0 // a SYN retransmit does not renew the timeout
		}
		if newState == tcpEstablished && timeout > to.tcp[tcpUnack] {
			timeout = to.tcp[tcpUnack] // a loose pickup: no long timeout
		}
	} else if !assured && (oldState == tcpSynRecv || oldState == tcpEstablished) && newState == tcpEstablished {
		en.status |= ctStAssured
	}
	return tcpAccept, timeout
}

// tcpCanEarlyDrop is tcp_can_early_drop: a closing entry.
func tcpCanEarlyDrop(en *ctEntry) bool {
	switch en.state {
	case tcpFinWait, tcpLastAck, tcpTimeWait, tcpClose, tcpCloseWait:
		return true
	}
	return false
}

// tcpHandleInvalid is nf_tcp_handle_invalid: it reports whether an
// out-of-window FIN or RST answering the other side's FIN or RST should
// shorten an assured entry's timeout to the UNACK one (the caller lowers
// the expiry when it is later than that and at least 120 s away).
func tcpHandleInvalid(en *ctEntry, dir, index uint8) bool {
	if en.status&ctStAssured == 0 {
		return false
	}
	if index != tcpRstSet && index != tcpFinSet {
		return false
	}
	if en.lastDir() != dir && (en.lastIndex() == tcpFinSet || en.lastIndex() == tcpRstSet) {
		return true
	}
	en.setLast(index, dir)
	return false
}
