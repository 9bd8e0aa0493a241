package dataplane

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"net"
	"os"
	"sync/atomic"

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
// to a pcap file (snap length 262144).
//
// What a record says. When the packets come from a replay (Replay wires
// the replay port's frame stamps in), each record keeps what the input
// capture said of its packet: its timestamp, at the input's resolution (a
// nanosecond pcap file where the input had nanoseconds, microseconds
// otherwise), and its original length. A packet the pipeline made longer
// or shorter (a VLAN pushed, a header popped) keeps the difference between
// its original and captured lengths, so a packet the capture cut stays cut
// by as many bytes, and a whole one stays whole. Without stamps (a writer
// made by CreatePcapWriter or NewPcapWriter alone) timestamps are
// deterministic instead: the packet with index i (0 for the first packet
// this writer sees) is stamped i microseconds after the Unix epoch, and the
// original length is the captured length. Either way the same replay gives
// a byte-identical file on every run.
//
// Transmit copies the packet bytes into a buffered writer before returning:
// it only borrows frames (it is not a Completer), so the engine recycles
// them as soon as Transmit returns. Close flushes the buffer and closes the file. After a
// write error every call returns that error (wrapped with the path).
type PcapWriter struct {
	name   string
	path   string
	bw     *bufio.Writer
	closer io.Closer // the file; nil for NewPcapWriter over a non-Closer
	err    error     // sticky write error
	full   error     // the output limit was reached: every later packet is refused
	closed bool
	nano   bool          // nanosecond timestamps
	stamps *frameStamps  // per-frame stamps of the input; nil: synthetic
	budget *outputBudget // the outputs' byte limit; nil: none
	hdr    [16]byte

	packets, bytes atomic.Uint64
}

// pcapWriterOptions are what a replay adds to a writer.
type pcapWriterOptions struct {
	nano   bool
	stamps *frameStamps
	budget *outputBudget
}

// CreatePcapWriter creates (or truncates) the pcap file at path, writes its
// header with the given link type (layers.LinkTypeEthernet for pipeline
// output) and returns a port named name that appends to it.
func CreatePcapWriter(path string, name string, linkType layers.LinkType) (*PcapWriter, error) {
	return createPcapWriter(path, name, linkType, pcapWriterOptions{})
}

func createPcapWriter(path string, name string, linkType layers.LinkType, o pcapWriterOptions) (*PcapWriter, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("create pcap writer: %w", err)
	}
	w, err := newPcapWriter(path, name, f, f, linkType, o)
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
	return newPcapWriter(path, name, w, c, linkType, pcapWriterOptions{})
}

func newPcapWriter(path, name string, w io.Writer, c io.Closer, linkType layers.LinkType, o pcapWriterOptions) (*PcapWriter, error) {
	bw := bufio.NewWriterSize(w, pcapWriterBuffer)
	pw := pcapgo.NewWriter(bw)
	if o.nano {
		pw = pcapgo.NewWriterNanos(bw)
	}
	if o.budget != nil && !o.budget.take(pcapHeaderLen) {
		return nil, fmt.Errorf("pcap writer %s: %w", path, o.budget.err(0))
	}
	if err := pw.WriteFileHeader(pcapWriterSnaplen, linkType); err != nil {
		return nil, fmt.Errorf("pcap writer %s: write header: %w", path, err)
	}
	return &PcapWriter{name: name, path: path, bw: bw, closer: c, nano: o.nano, stamps: o.stamps, budget: o.budget}, nil
}

// frameStamps holds, per arena frame, what the input capture said of the
// packet in it. The replay port writes a frame's stamp when it fills the
// frame and the writers read it when they write the frame, both on the
// engine's I/O loop, so nothing is shared across goroutines. The frame
// number is the address shifted by the frame size, so it holds wherever a
// stage moved the packet's head within its frame.
type frameStamps struct {
	shift uint
	s     []frameStamp
}

type frameStamp struct {
	ts    int64 // Unix nanoseconds
	delta int32 // original length minus captured length, as the capture had them
}

func newFrameStamps(a *rings.Arena) *frameStamps {
	shift := uint(bits.TrailingZeros(uint(a.FrameSize())))
	return &frameStamps{shift: shift, s: make([]frameStamp, len(a.Mem())>>shift)}
}

// outputBudget is a byte limit on everything a replay writes to its output
// captures together (headers included). A writer takes from it before each
// record and refuses the record that would pass it; the replay port then
// stops reading (ReplayPort.budget), so the run ends with the report so far.
// Writers and the port all run on the engine's I/O loop.
type outputBudget struct {
	limit, used int64
	hit         bool
}

// ErrOutputLimit is wrapped by the error of a replay stopped because its
// outputs reached ReplayConfig.MaxOutput.
var ErrOutputLimit = errors.New("output limit reached")

func (b *outputBudget) take(n int64) bool {
	if b.used+n > b.limit {
		b.hit = true
		return false
	}
	b.used += n
	return true
}

// err is the error the replay stops with, after record records.
func (b *outputBudget) err(records uint64) error {
	return fmt.Errorf("%w: the output captures hold %s, and the next packet would pass the %s limit; the replay stopped after record %d",
		ErrOutputLimit, byteSize(uint64(b.used)), byteSize(uint64(b.limit)), records)
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
	if w.full != nil {
		return 0, w.full
	}
	i := w.packets.Load()
	var bytes uint64
	n := 0
	h := &w.hdr
	for _, d := range descs {
		data := a.Bytes(d)
		var ts int64
		orig := int64(len(data))
		if w.stamps != nil {
			st := w.stamps.s[d.Addr>>w.stamps.shift]
			ts, orig = st.ts, max(orig+int64(st.delta), 0)
		} else {
			ts = int64(i) * 1e3
		}
		if w.budget != nil && !w.budget.take(int64(len(h)+len(data))) {
			// Not sticky in err: what was written is still flushed.
			w.full = fmt.Errorf("pcap writer %s: %w", w.path, ErrOutputLimit)
			break
		}
		sec, frac := ts/1e9, ts%1e9
		if frac < 0 {
			sec, frac = sec-1, frac+1e9
		}
		if !w.nano {
			frac /= 1e3
		}
		binary.LittleEndian.PutUint32(h[0:4], uint32(sec))
		binary.LittleEndian.PutUint32(h[4:8], uint32(frac))
		binary.LittleEndian.PutUint32(h[8:12], uint32(len(data)))
		binary.LittleEndian.PutUint32(h[12:16], uint32(min(orig, math.MaxUint32)))
		w.bw.Write(h[:])
		if _, err := w.bw.Write(data); err != nil {
			w.fail(err)
			break
		}
		i++
		n++
		bytes += uint64(len(data))
	}
	w.packets.Add(uint64(n))
	w.bytes.Add(bytes)
	if w.err == nil && w.full != nil {
		return n, w.full
	}
	return n, w.err
}

// fail records the first write error. The buffered writer's own (sticky)
// error is preferred: it keeps the errno for errors.Is.
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
