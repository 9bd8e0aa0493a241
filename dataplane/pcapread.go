package dataplane

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

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

// errReadBudget is what the budget reader returns once it is spent.
var errReadBudget = errors.New("read budget exceeded")

// budgetReader counts the bytes read through it since the last reset and
// fails reads beyond its limit.
type budgetReader struct {
	r       io.Reader
	n       int64
	tripped bool
}

func (b *budgetReader) Read(p []byte) (int, error) {
	rem := readBudget - b.n
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
}

// recordReader reads records from a pcap or pcapng stream (optionally
// gzip-compressed), detecting the format by magic, and turns every failure
// into an error naming the capture and the record.
type recordReader struct {
	name    string
	budget  budgetReader
	pcap    *pcapgo.Reader
	ng      *pcapgo.NgReader
	kind    linkKind // pcap: the file's link type
	records uint64   // records read so far; the next one is records+1
}

// newRecordReader reads src's file header and checks its link type.
func newRecordReader(name string, src io.Reader) (*recordReader, error) {
	r := &recordReader{name: name}
	// One large buffer under everything: pcapgo reads each record header
	// and body with separate small reads, which would otherwise be one
	// syscall per 4 KiB of capture.
	src = bufio.NewReaderSize(src, 64<<10)
	r.budget.r = src
	var head [4]byte
	if err := r.readMagic(head[:]); err != nil {
		return nil, err
	}
	if head[0] == 0x1f && head[1] == 0x8b {
		gz, err := gzip.NewReader(io.MultiReader(bytes.NewReader(head[:]), src))
		if err != nil {
			return nil, r.corruptHeader(fmt.Errorf("gzip: %w", err))
		}
		r.budget.r = gz
		if err := r.readMagic(head[:]); err != nil {
			return nil, err
		}
	}
	stream := io.MultiReader(bytes.NewReader(head[:]), &r.budget)
	switch magic := binary.LittleEndian.Uint32(head[:]); magic {
	case magicPcapMicro, magicPcapNano, magicPcapMicroBE, magicPcapNanoBE:
		pr, err := pcapgo.NewReader(stream)
		if err != nil {
			return nil, r.corruptHeader(headerErr(err))
		}
		// Reject over-long records from their header, before reading them
		// (pcapgo accepts up to max(snaplen, 262144)). A smaller snaplen is
		// kept: pcapgo sizes its reused record buffer from it.
		if pr.Snaplen() > maxRecordLen {
			pr.SetSnaplen(maxRecordLen)
		}
		r.pcap = pr
		lt := uint32(pr.LinkType())
		if r.kind = linkKindOf(lt); r.kind == kindUnsupported {
			return nil, &LinkTypeError{Capture: name, LinkType: lt, Interface: -1}
		}
	case magicPcapNG:
		nr, err := pcapgo.NewNgReader(stream, pcapgo.NgReaderOptions{WantMixedLinkType: true})
		if err != nil {
			return nil, r.corruptHeader(headerErr(err))
		}
		r.ng = nr
	default:
		return nil, r.corruptHeader(fmt.Errorf("unknown magic 0x%08x (not a pcap or pcapng file)", magic))
	}
	return r, nil
}

// readMagic reads the first four bytes of the (decompressed) stream.
func (r *recordReader) readMagic(head []byte) error {
	n, err := io.ReadFull(&r.budget, head)
	switch {
	case err == nil:
		return nil
	case n == 0 && err == io.EOF:
		return r.corruptHeader(errors.New("empty file"))
	default:
		return r.corruptHeader(headerErr(err))
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
	return fmt.Errorf("capture %s: record %d: %w: %w", r.name, r.records+1, ErrCorruptCapture, err)
}

// next returns the next record, io.EOF at a clean end of the capture, a
// *LinkTypeError for a pcapng interface of an unsupported link type, or an
// error wrapping ErrCorruptCapture. The record's data is valid until the
// next call. It does not allocate for records of a size seen before.
func (r *recordReader) next() (rec record, err error) {
	r.budget.n = 0
	data, capLen, iface, lt, err := r.read()
	if err != nil {
		switch {
		case r.budget.tripped:
			return rec, r.corruptRecord(fmt.Errorf("read %d MiB without finding the end of the record (bogus length field)", readBudget>>20))
		case capLen > maxRecordLen || capLen < 0:
			return rec, r.corruptRecord(fmt.Errorf("record claims %d bytes, more than the %d-byte maximum", uint32(capLen), maxRecordLen))
		case err == io.EOF && capLen == 0:
			return rec, io.EOF
		case err == io.EOF || err == io.ErrUnexpectedEOF:
			return rec, r.corruptRecord(fmt.Errorf("truncated record: %w", io.ErrUnexpectedEOF))
		}
		return rec, r.corruptRecord(err)
	}
	switch {
	case len(data) == 0:
		return rec, r.corruptRecord(errors.New("zero-length record"))
	case len(data) > maxRecordLen:
		return rec, r.corruptRecord(fmt.Errorf("record claims %d bytes, more than the %d-byte maximum", len(data), maxRecordLen))
	}
	r.records++
	rec = record{data: data, kind: r.kind, iface: iface}
	if r.ng != nil {
		if rec.kind = linkKindOf(lt); rec.kind == kindUnsupported {
			return rec, &LinkTypeError{Capture: r.name, LinkType: lt, Interface: iface}
		}
	}
	return rec, nil
}

// read calls pcapgo, turning a panic inside it (a reader bug on hostile
// input) into an error instead of a crash.
func (r *recordReader) read() (data []byte, capLen, iface int, lt uint32, err error) {
	defer func() {
		if p := recover(); p != nil {
			data, err = nil, fmt.Errorf("capture reader failed: %v", p)
		}
	}()
	if r.pcap != nil {
		d, ci, err := r.pcap.ZeroCopyReadPacketData()
		return d, ci.CaptureLength, 0, 0, err
	}
	d, ci, err := r.ng.ZeroCopyReadPacketData()
	if err == nil && len(ci.AncillaryData) > 0 {
		if l, ok := ci.AncillaryData[0].(layers.LinkType); ok {
			lt = uint32(l)
		}
	}
	return d, ci.CaptureLength, ci.InterfaceIndex, lt, err
}
