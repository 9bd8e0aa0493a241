package dataplane

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// ErrUnsupportedFormat is wrapped by errors for capture files of a format
// or version that the replay port does not read (and libpcap does not
// either): the file is not corrupt, just of a kind we name.
var ErrUnsupportedFormat = errors.New("unsupported capture format")

// Old pcap variants. pcapgo reads only version 2.4 with the standard
// magics; libpcap (sf-pcap.c) also reads:
//
//   - versions 2.0 to 2.3 (and 543.0, DG/UX tcpdump): before 2.3 the record
//     header held the original length before the captured length; some 2.3
//     files were written either way, so libpcap swaps a 2.3 record only when
//     its captured length exceeds its original length;
//   - the "modified" format of Alexey Kuznetzov's patched libpcap, shipped
//     by Red Hat's tcpdump (magic 0xa1b2cd34): every record header carries 8
//     more bytes (interface index, protocol, packet type, pad).
//
// legacyPcap turns such a stream into a version 2.4 stream with standard
// record headers, so pcapgo reads it unchanged. The records' bytes pass
// through untouched. Variants that share the standard magic and differ only
// in their record headers (Nokia, SuSE 6.3 "ss990915" with 28-byte headers,
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

// legacy reports whether pcapgo cannot read the variant as it is.
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

// legacyPcap rewrites a legacy pcap stream (see pcapVariant) as version 2.4
// with 16-byte record headers. It copies bytes, one record header at a time,
// and allocates nothing after construction.
type legacyPcap struct {
	src  *bufio.Reader
	v    pcapVariant
	out  [pcapHeaderLen]byte // pending rewritten header bytes
	outN int                 // bytes of out still to hand out, from outOff
	off  int
	body uint32 // record bytes still to pass through
	err  error  // sticky error from src
}

// newLegacyPcap reads the file header from src (which the caller has peeked
// and checked with pcapVariantOf) and returns a reader of the rewritten
// stream.
func newLegacyPcap(src *bufio.Reader, v pcapVariant) (*legacyPcap, error) {
	l := &legacyPcap{src: src, v: v}
	if _, err := io.ReadFull(src, l.out[:pcapHeaderLen]); err != nil {
		return nil, err
	}
	if v.modified {
		// Same byte order, standard microsecond magic.
		v.order.PutUint32(l.out[0:4], 0xA1B2C3D4)
	}
	v.order.PutUint16(l.out[4:6], 2)
	v.order.PutUint16(l.out[6:8], 4)
	l.off, l.outN = 0, pcapHeaderLen
	return l, nil
}

func (l *legacyPcap) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		if l.outN > 0 {
			k := copy(p[n:], l.out[l.off:l.off+l.outN])
			l.off += k
			l.outN -= k
			n += k
			continue
		}
		if l.body > 0 {
			want := min(uint32(len(p)-n), l.body)
			k, err := l.src.Read(p[n : n+int(want)])
			n += k
			l.body -= uint32(k)
			if err != nil {
				return n, err
			}
			if k == 0 {
				break
			}
			continue
		}
		if l.err != nil {
			break
		}
		if n > 0 && l.src.Buffered() < l.hdrLen() {
			break // hand out what we have before a read that may block
		}
		if err := l.nextHeader(); err != nil {
			l.err = err
			break
		}
	}
	if n == 0 && l.err != nil {
		return 0, l.err
	}
	return n, nil
}

func (l *legacyPcap) hdrLen() int {
	if l.v.modified {
		return pcapRecordHeaderLen + modifiedExtraLen
	}
	return pcapRecordHeaderLen
}

// nextHeader reads one record header and queues its standard form. A cut
// header is passed on as it is, so that pcapgo reports the truncation.
func (l *legacyPcap) nextHeader() error {
	h := l.out[:l.hdrLen()]
	k, err := io.ReadFull(l.src, h)
	if err != nil {
		if k > 0 {
			l.off, l.outN = 0, k
			return nil
		}
		return err
	}
	o := l.v.order
	incl, orig := o.Uint32(h[8:12]), o.Uint32(h[12:16])
	if l.v.lengths == lengthsSwapped || l.v.lengths == lengthsMaybeSwapped && incl > orig {
		incl, orig = orig, incl
		o.PutUint32(h[8:12], incl)
		o.PutUint32(h[12:16], orig)
	}
	l.off, l.outN = 0, pcapRecordHeaderLen
	l.body = incl
	return nil
}
