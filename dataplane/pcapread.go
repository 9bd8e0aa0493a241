package dataplane

import (
	"bufio"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"strings"
)

// The capture reader. It reads classic pcap (every version libpcap reads,
// see pcaplegacy.go) and pcapng, optionally gzip-compressed, in one pass
// over any io.Reader (a file, a pipe, standard input), and takes the
// records libpcap takes:
//
//   - a record whose captured length exceeds its original length is read as
//     it is (libpcap's sf-pcap.c and sf-pcapng.c do not check the two
//     against each other; tshark reads it too), and its lengths are kept;
//   - a pcapng block that is not a packet, an interface or a section header
//     (name resolution, custom, systemd journal, decryption secrets,
//     interface statistics, any unknown type) is skipped whatever its size,
//     without being held in memory: its length bounds nothing but the time
//     spent reading past it. libpcap holds every block whole, up to 16 MiB;
//     we hold only what we parse.
//   - blocks we parse are held whole up to a bound that is a memory limit,
//     said in the error when passed: maxPacketBlock for packet blocks (the
//     262,144-byte maximum record, plus options, as libpcap sizes its
//     largest block), maxHeaderBlock for section headers and interface
//     descriptions (libpcap's own 1 MiB limit for a section header).
//
// Every error names the record (1-based, the number tshark gives the frame)
// and says what is wrong; pcapng errors also name the block type and its
// byte offset (in the decompressed stream for a gzip file).
//
// It is its own parser, not pcapgo's: pcapgo refuses records with captured
// length above original length, reads name-resolution blocks into memory,
// and its errors cannot say where a block is. Reading from the buffer with
// Peek also saves pcapgo's copy of every record: a record that fits the
// read buffer is handed out in place.

// maxRecordLen is the longest capture record accepted: libpcap's
// MAXIMUM_SNAPLEN. A record header claiming more is corrupt, whatever snap
// length the file header declares. Records longer than the file's own snap
// length but within this bound are read, as tcpdump and Wireshark do (some
// writers, dpkt among them, do not truncate to the snap length they declare);
// they are then skipped as oversize if they do not fit a frame.
const maxRecordLen = 262144

// Bounds on what the reader holds of one pcapng block (see above).
const (
	maxPacketBlock = 32 + maxRecordLen + 128<<10 // header, the largest record, 128 KiB of options
	maxHeaderBlock = 1 << 20
)

// streamBufSize is the read buffer between the (decompressed) stream and
// the parsers: one refill and one syscall per 64 KiB. Records up to this
// size are read in place.
const streamBufSize = 64 << 10

// pcapHeaderLen is the length of a pcap file header.
const pcapHeaderLen = 24

// Capture file magics, as read little-endian from the first four bytes.
const (
	magicPcapMicro   = 0xA1B2C3D4
	magicPcapNano    = 0xA1B23C4D
	magicPcapMicroBE = 0xD4C3B2A1
	magicPcapNanoBE  = 0x4D3CB2A1
	magicPcapNG      = 0x0A0D0D0A // section header block type, same in both byte orders
	ngByteOrderMagic = 0x1A2B3C4D
)

// pcapng block types (pcapng specification, section 11.1).
const (
	ngBlockIDB = 0x00000001
	ngBlockPB  = 0x00000002 // obsolete packet block
	ngBlockSPB = 0x00000003
	ngBlockNRB = 0x00000004
	ngBlockISB = 0x00000005
	ngBlockEPB = 0x00000006
	ngBlockSHB = magicPcapNG
)

// ngBlockName names a pcapng block type in errors.
func ngBlockName(t uint32) string {
	switch t {
	case ngBlockSHB:
		return "section header block"
	case ngBlockIDB:
		return "interface description block"
	case ngBlockPB:
		return "packet block"
	case ngBlockSPB:
		return "simple packet block"
	case ngBlockNRB:
		return "name resolution block"
	case ngBlockISB:
		return "interface statistics block"
	case ngBlockEPB:
		return "enhanced packet block"
	case 0x00000009:
		return "systemd journal export block"
	case 0x0000000A:
		return "decryption secrets block"
	case 0x00000BAD, 0x40000BAD:
		return "custom block"
	}
	return "block"
}

// countReader counts the bytes read through it: the position in the
// stream, for progress and for the offsets errors name.
type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// record is one capture record: its bytes (valid until the next call to
// readInto: a view of the reader's buffer), how its link type becomes
// Ethernet, and what the capture said of it.
type record struct {
	data  []byte
	kind  linkKind
	iface int // pcapng interface index; 0 for pcap
	// cut: the capture kept fewer bytes than the packet had (the record's
	// captured length is below its original length: a small snaplen).
	cut bool
	// ts is the record's timestamp in nanoseconds since the Unix epoch (0
	// for a pcapng simple packet block, which has none).
	ts int64
	// orig is the record's original length as the capture gave it; it may
	// be below len(data) (see the package's reading rules above).
	orig uint32
}

// ngIface is what a pcapng interface description block said.
type ngIface struct {
	linkType uint32
	kind     linkKind
	snaplen  uint32
	// Timestamp units: decimal 10^-exp or, when binary, 2^-exp seconds.
	exp    uint8
	binary bool
	offset int64 // if_tsoffset, seconds
}

// recordReader reads records from a pcap or pcapng stream (optionally
// gzip-compressed), detecting the format by magic, and turns every failure
// into an error naming the capture and the record.
//
// The stream is src → count → raw buffer [→ gzip → count → unz buffer];
// the parsers read the last buffer. A rewind resets these layers and reads
// the file header again; it allocates nothing.
type recordReader struct {
	name string
	src  io.Reader
	in   countReader   // over src: bytes of the capture as stored
	raw  *bufio.Reader // over in
	gz   *gzip.Reader  // over raw, when compressed
	z    countReader   // over gz
	unz  *bufio.Reader // over z
	pos  *countReader  // in or z: the one under buf
	buf  *bufio.Reader // raw or unz: the one the parsers read
	gzip bool

	ng bool // pcapng; else classic pcap

	// pcap
	be       bool // big-endian record headers
	nanoRes  bool // pcap: nanosecond magic; pcapng: an interface finer than 1 µs
	snaplen  uint32
	kind     linkKind // the file's link type
	linkType uint32
	variant  pcapVariant
	legacy   string // the legacy variant's name (see pcaplegacy.go), or ""
	hdrLen   int    // record header length: 16, or 24 for the modified format

	// pcapng
	ngBE   bool
	ifaces []ngIface // the current section's interfaces

	big     []byte // a record too long to read in place (grown to the longest, at most maxRecordLen)
	records uint64 // records read so far; the next one is records+1
}

// newRecordReader reads src's file header and checks its link type. For
// pcapng it also reads the blocks before the first packet (section header,
// interface descriptions), so that SnapLen and NanoResolution are known.
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
// panic in parsing becomes an error, as in next.
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
	r.in = countReader{r: r.src}
	r.pos = &r.in
	r.raw = resetBuffer(r.raw, &r.in)
	r.buf = r.raw
	r.gzip = false
	head, err := r.peekMagic()
	if err != nil {
		return err
	}
	if head[0] == 0x1f && head[1] == 0x8b {
		if r.gz == nil {
			r.gz, err = gzip.NewReader(r.raw)
		} else {
			err = r.gz.Reset(r.raw)
		}
		if err != nil {
			return r.corruptHeader(fmt.Errorf("gzip: %w", err))
		}
		r.gzip = true
		r.z = countReader{r: r.gz}
		r.pos = &r.z
		r.unz = resetBuffer(r.unz, &r.z)
		r.buf = r.unz
		if head, err = r.peekMagic(); err != nil {
			return err
		}
	}
	switch magic := binary.LittleEndian.Uint32(head); magic {
	case magicPcapMicro, magicPcapNano, magicPcapMicroBE, magicPcapNanoBE, magicPcapModified, magicPcapModifiedBE:
		r.ng = false
		return r.openPcap()
	case magicPcapNG:
		r.ng = true
		r.ifaces = r.ifaces[:0]
		r.nanoRes = false
		return r.openNg()
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

// openPcap reads a pcap file header.
func (r *recordReader) openPcap() error {
	h, err := r.buf.Peek(pcapHeaderLen)
	if err != nil {
		return r.corruptHeader(headerErr(err))
	}
	v, err := pcapVariantOf(h)
	if err != nil {
		return fmt.Errorf("capture %s: %w", r.name, err)
	}
	r.variant = v
	r.be = v.order == binary.BigEndian
	magic := binary.LittleEndian.Uint32(h)
	r.nanoRes = magic == magicPcapNano || magic == magicPcapNanoBE
	r.snaplen = v.order.Uint32(h[16:20])
	// The upper 16 bits of the link type field carry the FCS length and
	// flags (pcap-savefile(5)); the link type is the lower 16.
	r.linkType = v.order.Uint32(h[20:24]) & 0xFFFF
	r.legacy = ""
	r.hdrLen = pcapRecordHeaderLen
	if v.legacy() {
		r.legacy = v.String()
		if v.modified {
			r.hdrLen += modifiedExtraLen
		}
	}
	if _, err := r.buf.Discard(pcapHeaderLen); err != nil {
		return r.corruptHeader(headerErr(err))
	}
	if r.kind = linkKindOf(r.linkType); r.kind == kindUnsupported {
		return &LinkTypeError{Capture: r.name, LinkType: r.linkType, Interface: -1}
	}
	return nil
}

// openNg reads the section header and the blocks up to the first packet.
func (r *recordReader) openNg() error {
	var rec record
	for {
		h, err := r.buf.Peek(4)
		if len(h) == 0 && err == io.EOF && r.offset() > 0 {
			return nil // a capture of headers only
		}
		if len(h) == 4 {
			if t := r.u32ng(h); r.offset() > 0 && (t == ngBlockEPB || t == ngBlockPB || t == ngBlockSPB) {
				return nil
			}
		}
		if _, err := r.ngBlockInto(&rec); err != nil {
			return err
		}
	}
}

// offset is the stream position of the next byte the parsers will read.
func (r *recordReader) offset() int64 { return r.pos.n - int64(r.buf.Buffered()) }

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
	if r.legacy != "" {
		// A legacy file that goes wrong may be a variant that shares its
		// magic (see pcaplegacy.go): say which format it was read as.
		return fmt.Errorf("capture %s (read as %s): record %d: %w: %w", r.name, r.legacy, r.records+1, ErrCorruptCapture, err)
	}
	return fmt.Errorf("capture %s: record %d: %w: %w", r.name, r.records+1, ErrCorruptCapture, err)
}

// where says where a byte offset is, for errors.
func (r *recordReader) where(off int64) string {
	if r.gzip {
		return fmt.Sprintf("offset %d of the decompressed stream", off)
	}
	return fmt.Sprintf("offset %d", off)
}

// blockErr names a pcapng block (type t at offset off) and what is wrong.
// Before the first record it is a header error; after, a record error.
func (r *recordReader) blockErr(t uint32, off int64, err error) error {
	var e error
	if t == 0 {
		e = fmt.Errorf("pcapng block at %s: %w", r.where(off), err)
	} else {
		e = fmt.Errorf("pcapng %s (type 0x%08x) at %s: %w", ngBlockName(t), t, r.where(off), err)
	}
	return r.corruptRecord(e)
}

// ioErr maps a read failure inside a record: a clean or unexpected end of
// the stream is a truncated record; anything else (an I/O error, an
// interrupted read) is kept, wrapped, for errors.Is.
func ioErr(err error) error {
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return io.ErrUnexpectedEOF
	}
	return err
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
	if r.ng {
		return r.readNg(rec)
	}
	return r.readPcap(rec)
}

func (r *recordReader) u32(b []byte) uint32 {
	if r.be {
		return binary.BigEndian.Uint32(b)
	}
	return binary.LittleEndian.Uint32(b)
}

func (r *recordReader) u32ng(b []byte) uint32 {
	if r.ngBE {
		return binary.BigEndian.Uint32(b)
	}
	return binary.LittleEndian.Uint32(b)
}

func (r *recordReader) u16ng(b []byte) uint16 {
	if r.ngBE {
		return binary.BigEndian.Uint16(b)
	}
	return binary.LittleEndian.Uint16(b)
}

// readPcap reads one classic pcap record.
func (r *recordReader) readPcap(rec *record) error {
	h, err := r.buf.Peek(r.hdrLen)
	if err != nil {
		if len(h) == 0 && err == io.EOF {
			return io.EOF
		}
		if ioErr(err) == io.ErrUnexpectedEOF {
			return r.corruptRecord(fmt.Errorf("truncated record: the record header at %s is cut short after %d of %d bytes: %w",
				r.where(r.offset()), len(h), r.hdrLen, io.ErrUnexpectedEOF))
		}
		return r.corruptRecord(err)
	}
	sec, frac := r.u32(h[0:4]), r.u32(h[4:8])
	incl, orig := r.u32(h[8:12]), r.u32(h[12:16])
	switch r.variant.lengths {
	case lengthsSwapped:
		incl, orig = orig, incl
	case lengthsMaybeSwapped:
		if incl > orig {
			incl, orig = orig, incl
		}
	}
	if incl > maxRecordLen {
		return r.corruptRecord(fmt.Errorf("record claims %d bytes, more than the %d-byte maximum (record header at %s)", incl, maxRecordLen, r.where(r.offset())))
	}
	off := r.offset()
	if _, err := r.buf.Discard(r.hdrLen); err != nil {
		return r.corruptRecord(err)
	}
	data, err := r.body(int(incl))
	if err != nil {
		if ioErr(err) == io.ErrUnexpectedEOF {
			return r.corruptRecord(fmt.Errorf("truncated record: the header at %s says %d bytes, the file ends after %d: %w",
				r.where(off), incl, len(data), io.ErrUnexpectedEOF))
		}
		return r.corruptRecord(err)
	}
	ts := int64(sec) * 1e9
	if r.nanoRes {
		ts += int64(frac)
	} else {
		ts += int64(frac) * 1e3
	}
	r.records++
	*rec = record{data: data, kind: r.kind, cut: orig > incl, ts: ts, orig: orig}
	return nil
}

// body reads the next n bytes: in place when they fit the read buffer,
// into r.big otherwise. On a short read it returns what it got.
func (r *recordReader) body(n int) ([]byte, error) {
	if n <= r.buf.Size() {
		data, err := r.buf.Peek(n)
		if err != nil {
			return data, err
		}
		// The bytes stay where they are until the next read of the buffer.
		r.buf.Discard(n)
		return data, nil
	}
	if cap(r.big) < n {
		r.big = make([]byte, n)
	}
	data := r.big[:n]
	k, err := io.ReadFull(r.buf, data)
	return data[:k], err
}

// skip discards n bytes of a block the reader does not hold.
func (r *recordReader) skip(n int64) (int64, error) {
	var done int64
	for done < n {
		k := int(min(n-done, 1<<30))
		d, err := r.buf.Discard(k)
		done += int64(d)
		if err != nil {
			return done, err
		}
	}
	return done, nil
}

// readNg reads pcapng blocks up to and including the next packet block.
func (r *recordReader) readNg(rec *record) error {
	for {
		ok, err := r.ngBlockInto(rec)
		if err != nil || ok {
			return err
		}
	}
}

// ngBlockInto reads one block. For a packet block it fills rec and reports
// true; other blocks are parsed (section header, interface description) or
// skipped.
func (r *recordReader) ngBlockInto(rec *record) (bool, error) {
	off := r.offset()
	h, err := r.buf.Peek(12)
	if len(h) < 8 {
		if len(h) == 0 && err == io.EOF {
			return false, io.EOF
		}
		if ioErr(err) == io.ErrUnexpectedEOF {
			return false, r.blockErr(0, off, fmt.Errorf("truncated: the file ends %d bytes into a block header: %w", len(h), io.ErrUnexpectedEOF))
		}
		return false, r.corruptRecord(err)
	}
	t := r.u32ng(h[0:4])
	if binary.LittleEndian.Uint32(h[0:4]) == ngBlockSHB {
		t = ngBlockSHB
		if len(h) < 12 {
			return false, r.blockErr(t, off, fmt.Errorf("truncated: the file ends %d bytes into the block: %w", len(h), io.ErrUnexpectedEOF))
		}
		switch bom := h[8:12]; {
		case binary.LittleEndian.Uint32(bom) == ngByteOrderMagic:
			r.ngBE = false
		case binary.BigEndian.Uint32(bom) == ngByteOrderMagic:
			r.ngBE = true
		default:
			err := r.blockErr(t, off, fmt.Errorf("bad byte order magic 0x%08x (want 0x1a2b3c4d in either byte order)", binary.LittleEndian.Uint32(bom)))
			if off == 0 {
				return false, r.corruptHeader(fmt.Errorf("pcapng section header: bad byte order magic 0x%08x", binary.LittleEndian.Uint32(bom)))
			}
			return false, err
		}
	}
	length := r.u32ng(h[4:8])
	switch {
	case length < 12:
		return false, r.blockErr(t, off, fmt.Errorf("block length %d is less than the 12-byte minimum", length))
	case length%4 != 0:
		return false, r.blockErr(t, off, fmt.Errorf("block length %d is not a multiple of 4", length))
	}
	switch t {
	case ngBlockEPB, ngBlockPB, ngBlockSPB:
		return true, r.ngPacket(rec, t, off, length)
	case ngBlockSHB, ngBlockIDB:
		if length > maxHeaderBlock {
			return false, r.blockErr(t, off, fmt.Errorf("block length %d is more than the %d-byte limit this reader holds for a header block", length, maxHeaderBlock))
		}
		blk, err := r.wholeBlock(t, off, length)
		if err != nil {
			return false, err
		}
		if t == ngBlockSHB {
			return false, r.ngSection(blk, off)
		}
		return false, r.ngInterface(blk, off)
	}
	// Any other block: skipped, whatever its size, holding nothing.
	if n, err := r.skip(int64(length) - 4); err != nil {
		return false, r.truncatedBlock(t, off, length, n, err)
	}
	tr, err := r.buf.Peek(4)
	if err != nil {
		return false, r.truncatedBlock(t, off, length, int64(length)-4+int64(len(tr)), err)
	}
	if tl := r.u32ng(tr); tl != length {
		return false, r.blockErr(t, off, fmt.Errorf("block length %d in its header but %d in its trailer", length, tl))
	}
	r.buf.Discard(4)
	return false, nil
}

// truncatedBlock reports a block the stream ended in (or a read error).
func (r *recordReader) truncatedBlock(t uint32, off int64, length uint32, got int64, err error) error {
	if ioErr(err) == io.ErrUnexpectedEOF {
		return r.blockErr(t, off, fmt.Errorf("truncated record: block length %d, the file ends after %d bytes of it: %w", length, got, io.ErrUnexpectedEOF))
	}
	return r.corruptRecord(fmt.Errorf("pcapng %s at %s: %w", ngBlockName(t), r.where(off), err))
}

// wholeBlock reads a block of at most maxHeaderBlock bytes whole, checks
// its trailer and returns it (a view valid until the next read).
func (r *recordReader) wholeBlock(t uint32, off int64, length uint32) ([]byte, error) {
	blk, err := r.body(int(length))
	if err != nil {
		return nil, r.truncatedBlock(t, off, length, int64(len(blk)), err)
	}
	if tl := r.u32ng(blk[length-4:]); tl != length {
		return nil, r.blockErr(t, off, fmt.Errorf("block length %d in its header but %d in its trailer", length, tl))
	}
	return blk, nil
}

// ngSection starts a new section: its interfaces are forgotten.
func (r *recordReader) ngSection(blk []byte, off int64) error {
	if len(blk) < 28 {
		return r.blockErr(ngBlockSHB, off, fmt.Errorf("block length %d is less than the 28 bytes a section header needs", len(blk)))
	}
	if major := r.u16ng(blk[12:14]); major != 1 {
		err := fmt.Errorf("%w: pcapng version %d.%d (libpcap and tcpdump read 1.0 to 1.2)", ErrUnsupportedFormat, major, r.u16ng(blk[14:16]))
		return fmt.Errorf("capture %s: %w", r.name, err)
	}
	r.ifaces = r.ifaces[:0]
	return nil
}

// ngInterface reads an interface description block.
func (r *recordReader) ngInterface(blk []byte, off int64) error {
	if len(blk) < 20 {
		return r.blockErr(ngBlockIDB, off, fmt.Errorf("block length %d is less than the 20 bytes an interface description needs", len(blk)))
	}
	ifc := ngIface{linkType: uint32(r.u16ng(blk[8:10])), snaplen: r.u32ng(blk[12:16]), exp: 6}
	ifc.kind = linkKindOf(ifc.linkType)
	opts := blk[16 : len(blk)-4]
	for len(opts) >= 4 {
		code, n := r.u16ng(opts[0:2]), int(r.u16ng(opts[2:4]))
		padded := (n + 3) &^ 3
		if 4+padded > len(opts) {
			return r.blockErr(ngBlockIDB, off, fmt.Errorf("option %d of length %d runs past the end of the block", code, n))
		}
		v := opts[4 : 4+n]
		switch code {
		case 0: // opt_endofopt
			opts = nil
			continue
		case 9: // if_tsresol
			if n != 1 {
				return r.blockErr(ngBlockIDB, off, fmt.Errorf("if_tsresol option of length %d, want 1", n))
			}
			ifc.binary, ifc.exp = v[0]&0x80 != 0, v[0]&0x7F
			if !ifc.binary && ifc.exp > 19 || ifc.binary && ifc.exp > 63 {
				return r.blockErr(ngBlockIDB, off, fmt.Errorf("if_tsresol 0x%02x is finer than a 64-bit count can hold", v[0]))
			}
		case 14: // if_tsoffset
			if n != 8 {
				return r.blockErr(ngBlockIDB, off, fmt.Errorf("if_tsoffset option of length %d, want 8", n))
			}
			if r.ngBE {
				ifc.offset = int64(binary.BigEndian.Uint64(v))
			} else {
				ifc.offset = int64(binary.LittleEndian.Uint64(v))
			}
		}
		opts = opts[4+padded:]
	}
	if !ifc.binary && ifc.exp > 6 || ifc.binary && ifc.exp > 19 {
		r.nanoRes = true // finer than a microsecond
	}
	r.ifaces = append(r.ifaces, ifc)
	return nil
}

// ngPacket reads an enhanced, simple or (obsolete) packet block.
func (r *recordReader) ngPacket(rec *record, t uint32, off int64, length uint32) error {
	if length > maxPacketBlock {
		return r.blockErr(t, off, fmt.Errorf("block length %d is more than the %d-byte limit for a packet block (the %d-byte maximum record plus 128 KiB of options)", length, maxPacketBlock, maxRecordLen))
	}
	fixed := 28 // header(8) + iface(4) + ts(8) + caplen(4) + len(4)
	if t == ngBlockSPB {
		fixed = 12 // header(8) + len(4)
	}
	if int(length) < fixed+4 {
		return r.blockErr(t, off, fmt.Errorf("block length %d is less than the %d bytes its fields need", length, fixed+4))
	}
	if len(r.ifaces) == 0 {
		return r.blockErr(t, off, errors.New("a packet before any interface description block (Interface id 0 not present)"))
	}
	// A block that fits the buffer is read in place, whole; a longer one
	// has its packet copied out and the rest skipped.
	whole := int(length) <= r.buf.Size()
	var h []byte
	var err error
	if whole {
		h, err = r.buf.Peek(int(length))
	} else {
		h, err = r.buf.Peek(fixed)
	}
	if err != nil {
		return r.truncatedBlock(t, off, length, int64(len(h)), err)
	}
	var iface int
	var incl, orig uint32
	var ts uint64
	room := length - uint32(fixed) - 4
	if t == ngBlockSPB {
		orig = r.u32ng(h[8:12])
		incl = min(orig, room)
		if s := r.ifaces[0].snaplen; s != 0 {
			incl = min(incl, s)
		}
	} else {
		if t == ngBlockPB {
			iface = int(r.u16ng(h[8:10]))
		} else {
			iface = int(r.u32ng(h[8:12]))
		}
		ts = uint64(r.u32ng(h[12:16]))<<32 | uint64(r.u32ng(h[16:20]))
		incl, orig = r.u32ng(h[20:24]), r.u32ng(h[24:28])
		if iface >= len(r.ifaces) || iface < 0 {
			return r.blockErr(t, off, fmt.Errorf("interface %d is not described (the section has %d interface description blocks; Interface id %d not present)", iface, len(r.ifaces), iface))
		}
	}
	if incl > maxRecordLen {
		return r.blockErr(t, off, fmt.Errorf("record claims %d bytes, more than the %d-byte maximum", incl, maxRecordLen))
	}
	if incl > room {
		return r.blockErr(t, off, fmt.Errorf("captured length %d runs past the end of the block (block length %d leaves %d bytes for the packet)", incl, length, room))
	}
	ifc := &r.ifaces[iface]
	var data []byte
	if whole {
		if tl := r.u32ng(h[length-4:]); tl != length {
			return r.blockErr(t, off, fmt.Errorf("block length %d in its header but %d in its trailer", length, tl))
		}
		data = h[fixed : fixed+int(incl)]
		r.buf.Discard(int(length)) // the bytes stay where they are until the next read
	} else {
		r.buf.Discard(fixed)
		if cap(r.big) < int(incl) {
			r.big = make([]byte, incl)
		}
		data = r.big[:incl]
		if k, err := io.ReadFull(r.buf, data); err != nil {
			return r.truncatedBlock(t, off, length, int64(fixed+k), err)
		}
		if err := r.ngTail(t, off, length, int64(room-incl), int64(fixed)+int64(incl)); err != nil {
			return err
		}
	}
	var tsNs int64
	if t != ngBlockSPB {
		tsNs = ifc.nanos(ts)
	}
	r.records++
	*rec = record{data: data, kind: ifc.kind, iface: iface, cut: orig > incl, ts: tsNs, orig: orig}
	if rec.kind == kindUnsupported {
		return &LinkTypeError{Capture: r.name, LinkType: ifc.linkType, Interface: iface}
	}
	return nil
}

// ngTail skips a packet block's padding and options and checks its
// trailer; done is how many of its bytes were consumed before.
func (r *recordReader) ngTail(t uint32, off int64, length uint32, rest, done int64) error {
	if n, err := r.skip(rest); err != nil {
		return r.truncatedBlock(t, off, length, done+n, err)
	}
	tr, err := r.buf.Peek(4)
	if err != nil {
		return r.truncatedBlock(t, off, length, done+rest+int64(len(tr)), err)
	}
	if tl := r.u32ng(tr); tl != length {
		return r.blockErr(t, off, fmt.Errorf("block length %d in its header but %d in its trailer", length, tl))
	}
	r.buf.Discard(4)
	return nil
}

// nanos converts a timestamp in the interface's units to Unix nanoseconds.
func (ifc *ngIface) nanos(ts uint64) int64 {
	off := ifc.offset * 1e9
	if ifc.binary {
		if ifc.exp == 0 {
			return int64(ts)*1e9 + off
		}
		sec, frac := ts>>ifc.exp, ts&(1<<ifc.exp-1)
		hi, lo := bits.Mul64(frac, 1e9)
		ns := hi<<(64-ifc.exp) | lo>>ifc.exp
		return int64(sec)*1e9 + int64(ns) + off
	}
	switch e := ifc.exp; {
	case e == 9:
		return int64(ts) + off
	case e < 9:
		return int64(ts)*pow10[9-e] + off
	default:
		return int64(ts/uint64(pow10[e-9])) + off
	}
}

var pow10 = [...]int64{1, 10, 100, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18}

// snapLen is the largest packet the capture's headers promise: the pcap
// file header's snap length, or the largest of the pcapng interfaces read
// so far (0 in an interface means no limit: maxRecordLen).
func (r *recordReader) snapLen() int {
	if !r.ng {
		return int(min(r.snaplen, maxRecordLen))
	}
	n := 0
	for _, ifc := range r.ifaces {
		s := int(ifc.snaplen)
		if s == 0 || s > maxRecordLen {
			s = maxRecordLen
		}
		n = max(n, s)
	}
	if n == 0 {
		n = maxRecordLen
	}
	return n
}

// recovered turns a panic inside the reader (a bug on hostile input) into
// an error naming the record, instead of a crash.
func (r *recordReader) recovered(p any) error {
	return r.corruptRecord(fmt.Errorf("capture reader failed: %v", p))
}

// linkNames names the link types other than Ethernet known so far (the
// file's, or the pcapng interfaces read at open), or "" when all are
// Ethernet.
func (r *recordReader) linkNames() string {
	var names []string
	add := func(lt uint32) {
		if lt == linkEthernet {
			return
		}
		n := fmt.Sprintf("%s (%d)", LinkTypeName(lt), lt)
		for _, m := range names {
			if m == n {
				return
			}
		}
		names = append(names, n)
	}
	if !r.ng {
		add(r.linkType)
	}
	for _, ifc := range r.ifaces {
		add(ifc.linkType)
	}
	return strings.Join(names, ", ")
}
