package dataplane

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"sync/atomic"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
	"github.com/warpflow/warpflow/rings"
)

// pcapWriterSnaplen is the snap length written in the file header: libpcap's
// MAXIMUM_SNAPLEN, above any frame size, so no packet is ever truncated.
const pcapWriterSnaplen = 262144

// pcapWriterBuffer is the write buffer size: records are batched into large
// writes instead of one syscall per packet.
const pcapWriterBuffer = 1 << 20

// PcapWriter is a transmit-only Port that appends every packet it transmits
// to a pcap file (microsecond timestamps, snap length 262144).
//
// Timestamps are deterministic, so the same replay gives a byte-identical
// file on every run: the packet with index i (0 for the first packet this
// writer sees) is stamped i microseconds after the Unix epoch. Transmit sees
// descriptors only, not Meta, so the index is the writer's own count, which
// equals the receive sequence number only when every packet goes to this
// port in order.
//
// Transmit copies the packet bytes into a buffered writer before returning:
// it only borrows frames (it is not a Completer), so the engine recycles
// them as soon as Transmit returns. Close flushes the buffer and closes the file. After a
// write error every call returns that error (wrapped with the path).
type PcapWriter struct {
	name   string
	path   string
	bw     *bufio.Writer
	pw     *pcapgo.Writer
	closer io.Closer // the file; nil for NewPcapWriter over a non-Closer
	err    error     // sticky write error
	closed bool

	packets, bytes atomic.Uint64
}

// CreatePcapWriter creates (or truncates) the pcap file at path, writes its
// header with the given link type (layers.LinkTypeEthernet for pipeline
// output) and returns a port named name that appends to it.
func CreatePcapWriter(path string, name string, linkType layers.LinkType) (*PcapWriter, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("create pcap writer: %w", err)
	}
	w, err := newPcapWriter(path, name, f, f, linkType)
	if err != nil {
		f.Close()
		return nil, err
	}
	return w, nil
}

// NewPcapWriter writes a pcap stream to w, naming it path in errors. Close
// flushes, and closes w if it is an io.Closer.
func NewPcapWriter(w io.Writer, path string, name string, linkType layers.LinkType) (*PcapWriter, error) {
	c, _ := w.(io.Closer)
	return newPcapWriter(path, name, w, c, linkType)
}

func newPcapWriter(path, name string, w io.Writer, c io.Closer, linkType layers.LinkType) (*PcapWriter, error) {
	bw := bufio.NewWriterSize(w, pcapWriterBuffer)
	pw := pcapgo.NewWriter(bw)
	if err := pw.WriteFileHeader(pcapWriterSnaplen, linkType); err != nil {
		return nil, fmt.Errorf("pcap writer %s: write header: %w", path, err)
	}
	return &PcapWriter{name: name, path: path, bw: bw, pw: pw, closer: c}, nil
}

// Name returns the port's name.
func (w *PcapWriter) Name() string { return w.name }

// Path returns the file the writer writes.
func (w *PcapWriter) Path() string { return w.path }

// Receive returns ErrNotReceiver: the writer only transmits.
func (w *PcapWriter) Receive(*rings.Batch) (int, error) {
	if w.closed {
		return 0, net.ErrClosed
	}
	return 0, ErrNotReceiver
}

// Transmit appends the packets to the file. It returns how many were
// written; after a write error, the rest are refused with that error.
func (w *PcapWriter) Transmit(a *rings.Arena, descs []rings.Desc) (int, error) {
	if w.closed {
		return 0, net.ErrClosed
	}
	if w.err != nil {
		return 0, w.err
	}
	i := w.packets.Load()
	var bytes uint64
	n := 0
	for _, d := range descs {
		data := a.Bytes(d)
		ci := gopacket.CaptureInfo{
			Timestamp:     time.Unix(int64(i/1e6), int64(i%1e6)*1e3),
			CaptureLength: len(data),
			Length:        len(data),
		}
		if err := w.pw.WritePacket(ci, data); err != nil {
			w.fail(err)
			break
		}
		i++
		n++
		bytes += uint64(len(data))
	}
	w.packets.Add(uint64(n))
	w.bytes.Add(bytes)
	return n, w.err
}

// fail records the first write error. pcapgo flattens header write errors
// to text, so the buffered writer's own (sticky) error is preferred: it keeps
// the errno for errors.Is.
func (w *PcapWriter) fail(err error) {
	if ferr := w.bw.Flush(); ferr != nil {
		err = ferr
	}
	w.err = fmt.Errorf("pcap writer %s: %w", w.path, err)
}

// Recycle does nothing: the writer never hands out frames.
func (w *PcapWriter) Recycle([]rings.Desc) {}

// Flush writes buffered records to the file.
func (w *PcapWriter) Flush() error {
	if w.closed {
		return net.ErrClosed
	}
	if w.err != nil {
		return w.err
	}
	if err := w.bw.Flush(); err != nil {
		w.err = fmt.Errorf("pcap writer %s: %w", w.path, err)
	}
	return w.err
}

// Close flushes buffered records and closes the file. The first error wins;
// the file is closed either way. Calls after Close return net.ErrClosed.
func (w *PcapWriter) Close() error {
	if w.closed {
		return net.ErrClosed
	}
	err := w.Flush()
	w.closed = true
	if w.closer != nil {
		if cerr := w.closer.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("pcap writer %s: close: %w", w.path, cerr)
		}
	}
	return err
}

// PcapWriterStats counts what a PcapWriter wrote.
type PcapWriterStats struct {
	Packets uint64
	Bytes   uint64
}

// Stats returns the writer's counters; safe from any goroutine.
func (w *PcapWriter) Stats() PcapWriterStats {
	return PcapWriterStats{Packets: w.packets.Load(), Bytes: w.bytes.Load()}
}

var _ Port = (*PcapWriter)(nil)
