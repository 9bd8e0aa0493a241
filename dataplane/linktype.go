package dataplane

import (
	"encoding/binary"
	"fmt"
)

// Link-type normalisation: the pipeline only ever sees Ethernet frames, so a
// capture of another link type is turned into Ethernet while its record is
// copied into a frame. The original link-layer header (if any) is dropped and
// a synthetic 14-byte Ethernet header is written in front of the L3 payload:
//
//	dst MAC  00:00:00:00:00:00 (always)
//	src MAC  00:00:00:00:00:00, or the sender's address for Linux SLL/SLL2
//	         when the capture recorded a 6-byte one
//	ethertype from the content, per link type (below)
//
// A record too short to hold its own link-layer header cannot be turned into
// anything and is skipped and counted (ReplayStats.Malformed). Everything
// else is handed to the pipeline, where the parse stage classifies bad
// payloads (a raw-IP record with version nibble 5 becomes a bad_version
// packet, not an error here).

// Link types by their LINKTYPE_ number (tcpdump.org/linktypes.html).
const (
	linkNull     = 0   // BSD loopback: 4-byte AF_ value in the capturing host's byte order
	linkEthernet = 1   // Ethernet
	linkPPP      = 9   // PPP, with or without the ff 03 HDLC-like address/control
	linkPPPHDLC  = 50  // PPP in HDLC-like framing (ff 03, or compressed away), or Cisco HDLC
	linkRawDLT12 = 12  // raw IP, DLT_RAW as most BSDs number it
	linkRawDLT14 = 14  // raw IP, DLT_RAW as OpenBSD numbers it
	linkRaw      = 101 // raw IP (LINKTYPE_RAW)
	linkCHDLC    = 104 // Cisco HDLC: address, control, 2-byte ethertype
	linkLoop     = 108 // OpenBSD loopback: 4-byte AF_ value, big-endian
	linkSLL      = 113 // Linux cooked capture v1, 16-byte header
	linkPPPPPPD  = 166 // PPP as pppd saves it: direction byte, 03, then the PPP protocol
	linkIPv4     = 228 // raw IPv4
	linkIPv6     = 229 // raw IPv6
	linkSLL2     = 276 // Linux cooked capture v2, 20-byte header
)

// Ethernet constants.
const (
	ethHeaderLen   = 14
	etherTypeIPv4  = 0x0800
	etherTypeIPv6  = 0x86DD
	etherTypeMin   = 0x0600 // values below are 802.3 length fields, not ethertypes
	ethMaxLenField = 1500
	sllHeaderLen   = 16
	sll2HeaderLen  = 20
	nullHeaderLen  = 4
	chdlcHeaderLen = 4 // address, control, protocol (2)
	pppHDLCLen     = 2 // ff 03 (or, for PPP_PPPD, direction and 03)
	chdlcUnicast   = 0x0f
	chdlcBroadcast = 0x8f
	etherTypeMPLS  = 0x8847
	etherTypeMPLSM = 0x8848
)

// linkKind is how one link type becomes Ethernet.
type linkKind uint8

const (
	kindUnsupported linkKind = iota
	kindEthernet             // pass through
	kindRawIP                // ethertype from the version nibble
	kindRawIPv4              // ethertype IPv4
	kindRawIPv6              // ethertype IPv6
	kindNull                 // 4-byte AF, either byte order
	kindLoop                 // 4-byte AF, big-endian
	kindSLL                  // 16-byte Linux cooked header
	kindSLL2                 // 20-byte Linux cooked v2 header
	kindPPP                  // optional ff 03, then the PPP protocol field
	kindPPPFramed            // 2 framing bytes, then the PPP protocol field
	kindPPPHDLC              // PPP_HDLC: framed PPP, unframed PPP or Cisco HDLC, by the first byte
	kindCHDLC                // 4-byte Cisco HDLC header carrying an ethertype
)

// linkKindOf returns how link type lt is normalised, or kindUnsupported.
func linkKindOf(lt uint32) linkKind {
	switch lt {
	case linkEthernet:
		return kindEthernet
	case linkRaw, linkRawDLT12, linkRawDLT14:
		return kindRawIP
	case linkIPv4:
		return kindRawIPv4
	case linkIPv6:
		return kindRawIPv6
	case linkNull:
		return kindNull
	case linkLoop:
		return kindLoop
	case linkSLL:
		return kindSLL
	case linkSLL2:
		return kindSLL2
	case linkPPP:
		return kindPPP
	case linkPPPHDLC:
		return kindPPPHDLC
	case linkPPPPPPD:
		return kindPPPFramed
	case linkCHDLC:
		return kindCHDLC
	}
	return kindUnsupported
}

// normalize works out how record data of kind k becomes an Ethernet frame:
// the frame is hdr[:hl] followed by data[skip:]. hl is 0 (Ethernet passes
// through) or ethHeaderLen. ok is false when data is too short for its own
// link-layer header. It never allocates and never writes to data.
func normalize(k linkKind, data []byte, hdr *[ethHeaderLen]byte) (hl, skip int, ok bool) {
	if k == kindPPPHDLC {
		k = pppHDLCKind(data)
	}
	var et uint16
	switch k {
	case kindEthernet:
		return 0, 0, true
	case kindRawIP:
		et = etherTypeByVersion(data)
	case kindRawIPv4:
		et = etherTypeIPv4
	case kindRawIPv6:
		et = etherTypeIPv6
	case kindNull, kindLoop:
		if len(data) < nullHeaderLen {
			return 0, 0, false
		}
		et = etherTypeOfAF(data[:nullHeaderLen], k == kindLoop)
		skip = nullHeaderLen
	case kindSLL:
		// pkttype(2) hatype(2) halen(2) addr(8) protocol(2)
		if len(data) < sllHeaderLen {
			return 0, 0, false
		}
		setSrcMAC(hdr, data[4:6], data[6:14])
		et = sllEtherType(binary.BigEndian.Uint16(data[14:16]), len(data)-sllHeaderLen)
		skip = sllHeaderLen
	case kindSLL2:
		// protocol(2) reserved(2) ifindex(4) hatype(2) pkttype(1) halen(1) addr(8)
		if len(data) < sll2HeaderLen {
			return 0, 0, false
		}
		setSrcMAC(hdr, data[11:12], data[12:20])
		et = sllEtherType(binary.BigEndian.Uint16(data[0:2]), len(data)-sll2HeaderLen)
		skip = sll2HeaderLen
	case kindPPP, kindPPPFramed:
		off := 0
		if k == kindPPPFramed || len(data) >= pppHDLCLen && data[0] == 0xff && data[1] == 0x03 {
			off = pppHDLCLen
		}
		var n int
		if et, n = pppEtherType(data[min(off, len(data)):]); n == 0 {
			return 0, 0, false
		}
		skip = off + n
	case kindCHDLC:
		// address(1) control(1) protocol(2); the protocol is an ethertype
		if len(data) < chdlcHeaderLen {
			return 0, 0, false
		}
		if et = binary.BigEndian.Uint16(data[2:4]); et < etherTypeMin {
			et = 0 // not an ethertype: unknown L3, not an 802.3 length
		}
		skip = chdlcHeaderLen
	default:
		return 0, 0, false
	}
	if k != kindSLL && k != kindSLL2 {
		clear(hdr[6:12])
	}
	clear(hdr[0:6])
	binary.BigEndian.PutUint16(hdr[12:14], et)
	return ethHeaderLen, skip, true
}

// pppHDLCKind tells the three things a LINKTYPE_PPP_HDLC record may hold
// apart by its first byte, as tcpdump and Wireshark do: the PPP address ff
// (ff 03 framing), a Cisco HDLC address (0f unicast, 8f broadcast: the link
// type also carries Cisco HDLC), or anything else, PPP whose address and
// control fields were compressed away (RFC 1661 ACFC).
func pppHDLCKind(data []byte) linkKind {
	switch {
	case len(data) == 0:
		return kindPPP // too short either way
	case data[0] == 0xff:
		return kindPPPFramed
	case data[0] == chdlcUnicast || data[0] == chdlcBroadcast:
		return kindCHDLC
	}
	return kindPPP
}

// setSrcMAC writes the SLL sender address as the source MAC when it is a
// 6-byte address, and zeros otherwise. halen is the length field: 2 bytes
// (SLL) or 1 byte (SLL2), big-endian.
func setSrcMAC(hdr *[ethHeaderLen]byte, halen []byte, addr []byte) {
	n := 0
	for _, b := range halen {
		n = n<<8 | int(b)
	}
	if n == 6 {
		copy(hdr[6:12], addr[:6])
		return
	}
	clear(hdr[6:12])
}

// etherTypeByVersion picks the ethertype of a raw IP packet from its version
// nibble. Anything but 6 is labelled IPv4, so the parse stage reports a bad
// version (a named class) rather than an unknown protocol.
func etherTypeByVersion(data []byte) uint16 {
	if len(data) > 0 && data[0]>>4 == 6 {
		return etherTypeIPv6
	}
	return etherTypeIPv4
}

// etherTypeOfAF maps a BSD loopback AF_ value to an ethertype. NULL (0)
// stores it in the capturing host's byte order, which the file does not
// record: a value whose low 16 bits (read little-endian) are zero was
// written big-endian, as AF_ values are small. LOOP (108) is always
// big-endian. AF_INET is 2 everywhere; AF_INET6 is 24 (NetBSD, OpenBSD,
// BSD/OS), 28 (FreeBSD) or 30 (Darwin). Other families get ethertype 0,
// which the parse stage counts as an unknown L3 protocol.
func etherTypeOfAF(b []byte, bigEndian bool) uint16 {
	af := binary.LittleEndian.Uint32(b)
	if bigEndian || af&0xFFFF == 0 {
		af = binary.BigEndian.Uint32(b)
	}
	switch af {
	case 2:
		return etherTypeIPv4
	case 24, 28, 30:
		return etherTypeIPv6
	}
	return 0
}

// pppEtherType reads the PPP protocol field at the start of b and returns
// the ethertype it maps to and the field's length, or n == 0 when b is too
// short for it. The field is 2 bytes, or 1 when its first byte is odd
// (protocol-field compression, RFC 1661 section 6.5: every protocol number
// has an even high byte and an odd low byte). IPv4, IPv6 and MPLS map to
// their ethertypes; anything else (LCP 0xc021, IPCP 0x8021, compressed
// TCP, ...) gets ethertype 0, which the parse stage counts as an unknown
// L3 protocol.
func pppEtherType(b []byte) (et uint16, n int) {
	var proto uint16
	switch {
	case len(b) >= 1 && b[0]&1 == 1:
		proto, n = uint16(b[0]), 1
	case len(b) >= 2:
		proto, n = binary.BigEndian.Uint16(b), 2
	default:
		return 0, 0
	}
	switch proto {
	case 0x0021:
		et = etherTypeIPv4
	case 0x0057:
		et = etherTypeIPv6
	case 0x0281:
		et = etherTypeMPLS
	case 0x0283:
		et = etherTypeMPLSM
	}
	return et, n
}

// sllEtherType turns an SLL protocol field into an ethertype. Values of
// 0x0600 and up are ethertypes. Smaller ones (ETH_P_802_2 = 4 for LLC,
// ETH_P_802_3 = 1 for raw 802.3, ...) mean the payload is not an
// ethertype-framed packet; it is written as an 802.3 length field (the
// payload length, at most 1500), which is what an LLC frame on Ethernet has.
func sllEtherType(proto uint16, payload int) uint16 {
	if proto >= etherTypeMin {
		return proto
	}
	return uint16(min(payload, ethMaxLenField))
}

// supportedLinkTypes is the list named in unsupported-link-type errors.
const supportedLinkTypes = "ethernet, raw ipv4/ipv6, linux sll/sll2, bsd null/loop, ppp/ppp_hdlc/ppp_pppd, cisco hdlc"

// LinkTypeError reports a capture (or a pcapng interface in it) whose link
// type the replay port cannot turn into Ethernet frames. It wraps
// ErrUnsupportedLinkType, and its text is one line, for example:
//
//	capture foo.pcap: link type 105 (IEEE802_11) is not supported (supported: ethernet, raw ipv4/ipv6, linux sll/sll2, bsd null/loop, ppp/ppp_hdlc/ppp_pppd, cisco hdlc)
type LinkTypeError struct {
	Capture   string // capture name (path)
	LinkType  uint32 // LINKTYPE_ number
	Interface int    // pcapng interface index, or -1 for a pcap file
}

func (e *LinkTypeError) Error() string {
	iface := ""
	if e.Interface >= 0 {
		iface = fmt.Sprintf(" interface %d", e.Interface)
	}
	return fmt.Sprintf("capture %s:%s link type %d (%s) is not supported (supported: %s)",
		e.Capture, iface, e.LinkType, LinkTypeName(e.LinkType), supportedLinkTypes)
}

// Unwrap returns ErrUnsupportedLinkType.
func (e *LinkTypeError) Unwrap() error { return ErrUnsupportedLinkType }

// linkTypeNames holds tcpdump's LINKTYPE_ names (without the prefix) for the
// link types captures most often have.
var linkTypeNames = map[uint32]string{
	0: "NULL", 1: "ETHERNET", 3: "AX25", 6: "IEEE802_5", 7: "ARCNET_BSD",
	8: "SLIP", 9: "PPP", 10: "FDDI", 12: "RAW", 14: "RAW",
	50: "PPP_HDLC", 51: "PPP_ETHER", 100: "ATM_RFC1483", 101: "RAW",
	104: "C_HDLC", 105: "IEEE802_11", 107: "FRELAY", 108: "LOOP",
	113: "LINUX_SLL", 114: "LTALK", 117: "PFLOG", 119: "IEEE802_11_PRISM",
	122: "IP_OVER_FC", 123: "SUNATM", 127: "IEEE802_11_RADIOTAP",
	129: "ARCNET_LINUX", 138: "APPLE_IP_OVER_IEEE1394", 139: "MTP2_WITH_PHDR",
	140: "MTP2", 141: "MTP3", 142: "SCCP", 143: "DOCSIS", 144: "LINUX_IRDA",
	163: "IEEE802_11_AVS", 165: "BACNET_MS_TP", 166: "PPP_PPPD",
	169: "GPRS_LLC", 177: "LINUX_LAPD", 187: "BLUETOOTH_HCI_H4",
	189: "USB_LINUX", 192: "PPI", 195: "IEEE802_15_4_WITHFCS",
	201: "BLUETOOTH_HCI_H4_WITH_PHDR", 220: "USB_LINUX_MMAPPED",
	224: "FC_2", 227: "CAN_SOCKETCAN", 228: "IPV4", 229: "IPV6",
	230: "IEEE802_15_4_NOFCS", 231: "DBUS", 235: "DVB_CI", 239: "NFLOG",
	240: "NETANALYZER", 246: "IPNET", 249: "USBPCAP", 251: "NETLINK",
	252: "BLUETOOTH_LE_LL", 254: "SCTP", 263: "NG40", 273: "ETW",
	274: "NETANALYZER_NG", 275: "ZBOSS_NCP", 276: "LINUX_SLL2",
}

// LinkTypeName returns tcpdump's name for a LINKTYPE_ number ("C_HDLC"),
// USERn for the private-use range, or "unknown".
func LinkTypeName(lt uint32) string {
	if n, ok := linkTypeNames[lt]; ok {
		return n
	}
	if lt >= 147 && lt <= 162 {
		return fmt.Sprintf("USER%d", lt-147)
	}
	return "unknown"
}
