package dataplane

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// ErrUnsupportedFormat is wrapped by errors for capture files of a format
// or version that the replay port does not read (and libpcap does not
// either): the file is not corrupt, just of a kind we name.
var ErrUnsupportedFormat = errors.New("unsupported capture format")

// Old pcap variants. Besides version 2.4 with the standard magics, libpcap
// (sf-pcap.c) also reads:
//
//   - versions 2.0 to 2.3 (and 543.0, DG/UX tcpdump): before 2.3 the record
//     header held the original length before the captured length; some 2.3
//     files were written either way, so libpcap swaps a 2.3 record only when
//     its captured length exceeds its original length;
//   - the "modified" format of Alexey Kuznetzov's patched libpcap, shipped
//     by Red Hat's tcpdump (magic 0xa1b2cd34): every record header carries 8
//     more bytes (interface index, protocol, packet type, pad).
//
// The record reader (pcapread.go) reads them all: it swaps the lengths as
// libpcap does and reads the longer record header of the modified format.
// Variants that share the standard magic and differ only in their record
// headers (Nokia, SuSE 6.3 "ss990915" with 28-byte headers,
// AIX) cannot be told apart from the file header; Wireshark guesses them
// from the records, libpcap does not read them, and neither does this.
const (
	magicPcapModified   = 0xA1B2CD34 // read little-endian
	magicPcapModifiedBE = 0x34CDB2A1
	pcapRecordHeaderLen = 16
	modifiedExtraLen    = 8 // ifindex(4) protocol(2) pkt_type(1) pad(1)
)

// Length-order rules for legacy record headers, as libpcap names them.
const (
	lengthsNotSwapped = iota
	lengthsSwapped
	lengthsMaybeSwapped
)

// pcapVariant is what a pcap file header says about its records.
type pcapVariant struct {
	order    binary.ByteOrder
	major    uint16
	minor    uint16
	modified bool
	lengths  int
}

// legacy reports whether the variant is other than 2.4 with standard
// record headers (errors then name it).
func (v pcapVariant) legacy() bool {
	return v.modified || v.major != 2 || v.minor != 4
}

// String names the variant in errors.
func (v pcapVariant) String() string {
	s := fmt.Sprintf("pcap version %d.%d", v.major, v.minor)
	if v.modified {
		s = "modified pcap (magic 0xa1b2cd34, Kuznetzov/Red Hat tcpdump), version " + fmt.Sprintf("%d.%d", v.major, v.minor)
	}
	return s
}

// pcapVariantOf reads a classic pcap file header. It returns an error naming
// the version for one libpcap does not read either.
func pcapVariantOf(h []byte) (pcapVariant, error) {
	var v pcapVariant
	switch binary.LittleEndian.Uint32(h) {
	case magicPcapMicro, magicPcapNano:
		v.order = binary.LittleEndian
	case magicPcapMicroBE, magicPcapNanoBE:
		v.order = binary.BigEndian
	case magicPcapModified:
		v.order, v.modified = binary.LittleEndian, true
	case magicPcapModifiedBE:
		v.order, v.modified = binary.BigEndian, true
	}
	v.major, v.minor = v.order.Uint16(h[4:6]), v.order.Uint16(h[6:8])
	switch {
	case v.major == 2 && v.minor < 3, v.major == 543 && v.minor == 0:
		v.lengths = lengthsSwapped
	case v.major == 2 && v.minor == 3:
		v.lengths = lengthsMaybeSwapped
	case v.major == 2 && v.minor == 4:
	case v.major < 2:
		return v, fmt.Errorf("%w: archaic pcap version %d.%d (libpcap and tcpdump read 2.0 to 2.4)", ErrUnsupportedFormat, v.major, v.minor)
	default:
		return v, fmt.Errorf("%w: pcap version %d.%d (libpcap and tcpdump read 2.0 to 2.4)", ErrUnsupportedFormat, v.major, v.minor)
	}
	return v, nil
}
