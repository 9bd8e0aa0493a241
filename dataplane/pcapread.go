package dataplane

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// maxRecordLen is the longest capture record accepted: libpcap's
// MAXIMUM_SNAPLEN. A record header claiming more is corrupt, whatever snap
// length the file header declares. Records longer than the file's own snap
// length but within this bound are read, as tcpdump and Wireshark do (some
// writers, dpkt among them, do not truncate to the snap length they declare);
// they are then skipped as oversize if they do not fit a frame.
const maxRecordLen = 262144

// readBudget bounds the bytes one record read may pull from the stream:
// the record, block framing, any non-packet pcapng blocks skipped on the way,
// and read-ahead buffering. pcapgo sizes buffers by bytes actually read, not
// by header claims, but a bogus length in a large file could still make it
// read gigabytes into one record; the budget stops that at 2 MiB (about
// 8 MiB allocated as pcapgo's buffer grows).
const readBudget = 2 << 20

// streamBufSize is the read buffer between the (decompressed) stream and
// pcapgo: one refill, one budget check and one syscall per 64 KiB.
const streamBufSize = 64 << 10

// pcapHeaderLen is the length of a pcap file header.
const pcapHeaderLen = 24

// errReadBudget is what the budget reader returns once it is spent.
var errReadBudget = errors.New("read budget exceeded")

// budgetReader counts the bytes read through it and fails reads past limit.
// It sits under the stream's read buffer, so it runs once per refill, not
// once per pcapgo read.
type budgetReader struct {
	r       io.Reader
	n       int64 // bytes read through so far
	limit   int64 // n may not pass it
	tripped bool
}

func (b *budgetReader) Read(p []byte) (int, error) {
	rem := b.limit - b.n
	if rem <= 0 {
		b.tripped = true
		return 0, errReadBudget
	}
	if int64(len(p)) > rem {
		p = p[:rem]
	}
	n, err := b.r.Read(p)
	b.n += int64(n)
	return n, err
}

// reset points the budget at r with nothing read and no limit.
func (b *budgetReader) reset(r io.Reader) {
	*b = budgetReader{r: r, limit: math.MaxInt64}
}

// Capture file magics, as read little-endian from the first four bytes.
const (
	magicPcapMicro   = 0xA1B2C3D4
	magicPcapNano    = 0xA1B23C4D
	magicPcapMicroBE = 0xD4C3B2A1
	magicPcapNanoBE  = 0x4D3CB2A1
	magicPcapNG      = 0x0A0D0D0A // section header block type, same in both byte orders
)

// record is one capture record: its bytes (pcapgo's reused buffer, valid
// until the next call to next) and how its link type becomes Ethernet.
type record struct {
	data  []byte
	kind  linkKind
	iface int // pcapng interface index; 0 for pcap
	// cut: the capture kept fewer bytes than the packet had (the record's
	// captured length is below its original length: a small snaplen).
	cut bool
}

// recordReader reads records from a pcap or pcapng stream (optionally
// gzip-compressed), detecting the format by magic, and turns every failure
// into an error naming the capture and the record.
//
// The stream is src → budget → raw buffer [→ gzip → budget → unz buffer]
// → pcapgo. pcapgo reads the last buffer directly: its constructors wrap
// their input in bufio.NewReader, which returns a *bufio.Reader of at least
// the default size as it is. A rewind resets these layers and keeps the
// pcapgo reader when it reads the same buffer and the capture starts the
// same way: a pcap reader skips the file header it was made from; a pcapng
// reader reads the section header block again as a new section (which
// resets its interfaces), as it would in a multi-section file. So a rewind
// allocates nothing.
type recordReader struct {
	name    string
	src     io.Reader
	in      budgetReader  // over src; unlimited when gzip-compressed
	raw     *bufio.Reader // over in
	gz      *gzip.Reader  // over raw, when compressed
	z       budgetReader  // over gz
	unz     *bufio.Reader // over z
	lim     *budgetReader // in or z: the one under pcapgo
	buf     *bufio.Reader // raw or unz: the one pcapgo reads
	on      *bufio.Reader // the buffer pcap or ng was made on
	pcap    *pcapgo.Reader
	ng      *pcapgo.NgReader
	head    [pcapHeaderLen]byte // pcap: the file header pcap was made from
	kind    linkKind            // pcap: the file's link type
	variant string              // pcap: the legacy variant being rewritten (see pcaplegacy.go), or ""
	records uint64              // records read so far; the next one is records+1
}

// newRecordReader reads src's file header and checks its link type.
func newRecordReader(name string, src io.Reader) (*recordReader, error) {
	r := &recordReader{name: name, src: src}
	if err := r.open(); err != nil {
		return nil, err
	}
	return r, nil
}

// rewind restarts the reader at the start of src, which the caller has
// sought there. It allocates nothing unless the capture changed format.
func (r *recordReader) rewind() error {
	r.records = 0
	return r.open()
}

// open sets up (or resets) the stream layers and reads the file header. A
// panic in pcapgo's header parsing becomes an error, as in next.
func (r *recordReader) open() (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = r.corruptHeader(fmt.Errorf("capture reader failed: %v", p))
		}
	}()
	return r.openStream()
}

// openStream is open without the recover.
func (r *recordReader) openStream() error {
	r.in.reset(r.src)
	r.in.limit = readBudget
	r.lim = &r.in
	r.raw = resetBuffer(r.raw, &r.in)
	r.buf = r.raw
	head, err := r.peekMagic()
	if err != nil {
		return err
	}
	if head[0] == 0x1f && head[1] == 0x8b {
		// The budget moves to the decompressed bytes, which are what a
		// bogus length makes pcapgo read.
		r.in.limit = math.MaxInt64
		if r.gz == nil {
			r.gz, err = gzip.NewReader(r.raw)
		} else {
			err = r.gz.Reset(r.raw)
		}
		if err != nil {
			return r.corruptHeader(fmt.Errorf("gzip: %w", err))
		}
		r.z.reset(r.gz)
		r.z.limit = readBudget
		r.lim = &r.z
		r.unz = resetBuffer(r.unz, &r.z)
		r.buf = r.unz
		if head, err = r.peekMagic(); err != nil {
			return err
		}
	}
	switch magic := binary.LittleEndian.Uint32(head); magic {
	case magicPcapMicro, magicPcapNano, magicPcapMicroBE, magicPcapNanoBE, magicPcapModified, magicPcapModifiedBE:
		return r.openPcap()
	case magicPcapNG:
		if r.ng != nil && r.on == r.buf {
			return nil // reads the section header as a new section
		}
		r.pcap, r.ng = nil, nil
		nr, err := pcapgo.NewNgReader(r.buf, pcapgo.NgReaderOptions{WantMixedLinkType: true})
		if err != nil {
			return r.corruptHeader(headerErr(err))
		}
		r.ng, r.on = nr, r.buf
		return nil
	default:
		return r.corruptHeader(fmt.Errorf("unknown magic 0x%08x (not a pcap or pcapng file)", magic))
	}
}

// resetBuffer points b (a new buffer if nil) at rd with nothing buffered.
func resetBuffer(b *bufio.Reader, rd io.Reader) *bufio.Reader {
	if b == nil {
		return bufio.NewReaderSize(rd, streamBufSize)
	}
	b.Reset(rd)
	return b
}

// openPcap reads a pcap file header. On a rewind, when the header is the
// one the current pcapgo reader was made from, on the same buffer, it is
// skipped and the reader kept: its state is all from that header.
func (r *recordReader) openPcap() error {
	if r.pcap != nil && r.on == r.buf {
		if h, err := r.buf.Peek(pcapHeaderLen); err == nil && bytes.Equal(h, r.head[:]) {
			_, err := r.buf.Discard(pcapHeaderLen)
			return err
		}
	}
	r.pcap, r.ng = nil, nil
	h, err := r.buf.Peek(pcapHeaderLen)
	if err != nil {
		return r.corruptHeader(headerErr(err))
	}
	copy(r.head[:], h)
	v, err := pcapVariantOf(h)
	if err != nil {
		return fmt.Errorf("capture %s: %w", r.name, err)
	}
	var src io.Reader = r.buf
	r.variant = ""
	if v.legacy() {
		// pcapgo reads only 2.4 with standard record headers: feed it the
		// capture rewritten as that (see pcaplegacy.go).
		if src, err = newLegacyPcap(r.buf, v); err != nil {
			return r.corruptHeader(headerErr(err))
		}
		r.variant = v.String()
	}
	pr, err := pcapgo.NewReader(src)
	if err != nil {
		return r.corruptHeader(headerErr(err))
	}
	// Reject over-long records from their header, before reading them
	// (pcapgo accepts up to max(snaplen, 262144)). A smaller snaplen is
	// kept: pcapgo sizes its reused record buffer from it.
	if pr.Snaplen() > maxRecordLen {
		pr.SetSnaplen(maxRecordLen)
	}
	lt := uint32(pr.LinkType())
	if r.kind = linkKindOf(lt); r.kind == kindUnsupported {
		return &LinkTypeError{Capture: r.name, LinkType: lt, Interface: -1}
	}
	r.pcap, r.on = pr, r.buf
	if r.variant != "" {
		r.on = nil // rewound by making a new reader: its stream is rewritten
	}
	return nil
}

// peekMagic returns the first four bytes of the (decompressed) stream,
// leaving them in the stream.
func (r *recordReader) peekMagic() ([]byte, error) {
	head, err := r.buf.Peek(4)
	switch {
	case err == nil:
		return head, nil
	case len(head) == 0 && err == io.EOF:
		return nil, r.corruptHeader(errors.New("empty file"))
	default:
		return nil, r.corruptHeader(headerErr(err))
	}
}

// headerErr names a truncated file header as such.
func headerErr(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("truncated file header: %w", io.ErrUnexpectedEOF)
	}
	return err
}

func (r *recordReader) corruptHeader(err error) error {
	return fmt.Errorf("capture %s: %w: %w", r.name, ErrCorruptCapture, err)
}

func (r *recordReader) corruptRecord(err error) error {
	if r.variant != "" {
		// A legacy file that goes wrong may be a variant that shares its
		// magic (see pcaplegacy.go): say which format it was read as.
		return fmt.Errorf("capture %s (read as %s): record %d: %w: %w", r.name, r.variant, r.records+1, ErrCorruptCapture, err)
	}
	return fmt.Errorf("capture %s: record %d: %w: %w", r.name, r.records+1, ErrCorruptCapture, err)
}

// next returns the next record, io.EOF at a clean end of the capture, a
// *LinkTypeError for a pcapng interface of an unsupported link type, or an
// error wrapping ErrCorruptCapture. The record's data is valid until the
// next call. It does not allocate for records of a size seen before. A
// panic in the capture reader becomes an error (see recovered).
func (r *recordReader) next() (rec record, err error) {
	defer func() {
		if p := recover(); p != nil {
			rec, err = record{}, r.recovered(p)
		}
	}()
	err = r.readInto(&rec)
	return rec, err
}

// readInto is next without the recover, for a caller that recovers once
// around many records (see ReplayPort.receiveStream): it reads the next
// record into rec.
func (r *recordReader) readInto(rec *record) error {
	// The budget runs from the first byte of this record not yet consumed:
	// what the buffer holds was counted when it was read.
	r.lim.limit = r.lim.n - int64(r.buf.Buffered()) + readBudget
	if r.pcap != nil {
		data, ci, err := r.pcap.ZeroCopyReadPacketData()
		if err != nil {
			return r.readErr(ci.CaptureLength, err)
		}
		if len(data) > maxRecordLen {
			return r.badLen(len(data))
		}
		r.records++
		*rec = record{data: data, kind: r.kind, cut: ci.Length > len(data)}
		return nil
	}
	data, ci, err := r.ng.ZeroCopyReadPacketData()
	if err != nil {
		return r.readErr(ci.CaptureLength, err)
	}
	if len(data) > maxRecordLen {
		return r.badLen(len(data))
	}
	var lt uint32
	if len(ci.AncillaryData) > 0 {
		if l, ok := ci.AncillaryData[0].(layers.LinkType); ok {
			lt = uint32(l)
		}
	}
	r.records++
	*rec = record{data: data, kind: linkKindOf(lt), iface: ci.InterfaceIndex, cut: ci.Length > len(data)}
	if rec.kind == kindUnsupported {
		return &LinkTypeError{Capture: r.name, LinkType: lt, Interface: ci.InterfaceIndex}
	}
	return nil
}

// recovered turns a panic inside pcapgo (a reader bug on hostile input)
// into an error naming the record, instead of a crash.
func (r *recordReader) recovered(p any) error {
	return r.corruptRecord(fmt.Errorf("capture reader failed: %v", p))
}

// readErr maps a failed record read to io.EOF or a corrupt-capture error.
func (r *recordReader) readErr(capLen int, err error) error {
	switch {
	case r.lim.tripped:
		return r.corruptRecord(fmt.Errorf("read %d MiB without finding the end of the record (bogus length field)", readBudget>>20))
	case capLen > maxRecordLen || capLen < 0:
		return r.corruptRecord(fmt.Errorf("record claims %d bytes, more than the %d-byte maximum", uint32(capLen), maxRecordLen))
	case err == io.EOF && capLen == 0:
		return io.EOF
	case err == io.EOF || err == io.ErrUnexpectedEOF:
		return r.corruptRecord(fmt.Errorf("truncated record: %w", io.ErrUnexpectedEOF))
	}
	return r.corruptRecord(err)
}

// badLen reports a record of length n that pcapgo returned without error.
// (A zero-length record is not an error: the port skips and counts it, as
// tcpdump and tshark skip it.)
func (r *recordReader) badLen(n int) error {
	return r.corruptRecord(fmt.Errorf("record claims %d bytes, more than the %d-byte maximum", n, maxRecordLen))
}
