package main

import (
	"bytes"
	"fmt"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// serializeOpts is used for every well-formed packet: lengths and checksums
// are filled in by gopacket so the only defects in a capture are the ones a
// generator function introduces on purpose.
var serializeOpts = gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}

// minFrame is the shortest Ethernet frame without FCS. Captures taken on a
// receiving host show short frames padded to it, so mixed.pcap does too.
const minFrame = 60

// record is one packet of a capture with the note the manifest prints for it.
type record struct {
	data []byte
	note string
}

// capture accumulates the records of one output file. The first error is
// kept and every later call becomes a no-op (the bufio.Writer pattern), so
// builders stay free of error plumbing and nothing panics.
type capture struct {
	name string
	link layers.LinkType
	ng   bool // write pcapng instead of classic pcap
	pad  bool // pad Ethernet frames to minFrame
	base time.Time
	step time.Duration
	recs []record
	err  error
	ipID uint16
}

func newCapture(name string, link layers.LinkType, base time.Time) *capture {
	return &capture{name: name, link: link, base: base, step: time.Millisecond}
}

// nextID returns a fresh IPv4 identification value.
func (c *capture) nextID() uint16 {
	c.ipID++
	return c.ipID
}

// serialize encodes layers into bytes, wiring every TCP/UDP/ICMPv6 layer to
// the network layer that precedes it so tunnelled packets get inner
// checksums over the inner pseudo-header.
func (c *capture) serialize(ls ...gopacket.SerializableLayer) []byte {
	if c.err != nil {
		return nil
	}
	var netLayer gopacket.NetworkLayer
	for _, l := range ls {
		switch v := l.(type) {
		case *layers.IPv4:
			netLayer = v
		case *layers.IPv6:
			netLayer = v
		case *layers.TCP:
			c.setNet(v.SetNetworkLayerForChecksum, netLayer)
		case *layers.UDP:
			c.setNet(v.SetNetworkLayerForChecksum, netLayer)
		case *layers.ICMPv6:
			c.setNet(v.SetNetworkLayerForChecksum, netLayer)
		}
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, serializeOpts, ls...); err != nil {
		c.fail(fmt.Errorf("serialize: %w", err))
		return nil
	}
	return buf.Bytes()
}

func (c *capture) setNet(set func(gopacket.NetworkLayer) error, n gopacket.NetworkLayer) {
	if n == nil {
		c.fail(fmt.Errorf("transport layer without a network layer before it"))
		return
	}
	if err := set(n); err != nil {
		c.fail(fmt.Errorf("set network layer: %w", err))
	}
}

func (c *capture) fail(err error) {
	if c.err == nil {
		c.err = fmt.Errorf("%s packet %d: %w", c.name, len(c.recs), err)
	}
}

// frame serializes layers and appends the result as one record.
func (c *capture) frame(note string, ls ...gopacket.SerializableLayer) {
	c.raw(note, c.serialize(ls...))
}

// raw appends data as one record, padded to minFrame when c.pad is set.
func (c *capture) raw(note string, data []byte) {
	if c.err != nil {
		return
	}
	if c.pad && len(data) < minFrame {
		data = append(data, make([]byte, minFrame-len(data))...)
	}
	c.recs = append(c.recs, record{data: data, note: note})
}

// encode renders the capture file. Timestamps are base + i*step, so the
// output depends on nothing but the generator's code.
func (c *capture) encode() ([]byte, error) {
	if c.err != nil {
		return nil, c.err
	}
	var out bytes.Buffer
	write, flush, err := c.writer(&out)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c.name, err)
	}
	for i, r := range c.recs {
		ci := gopacket.CaptureInfo{
			Timestamp:     c.base.Add(time.Duration(i) * c.step),
			CaptureLength: len(r.data),
			Length:        len(r.data),
		}
		if err := write(ci, r.data); err != nil {
			return nil, fmt.Errorf("%s packet %d: %w", c.name, i, err)
		}
	}
	if err := flush(); err != nil {
		return nil, fmt.Errorf("%s: %w", c.name, err)
	}
	return out.Bytes(), nil
}

func (c *capture) writer(out *bytes.Buffer) (write func(gopacket.CaptureInfo, []byte) error, flush func() error, err error) {
	if !c.ng {
		w := pcapgo.NewWriter(out)
		if err := w.WriteFileHeader(snapLen, c.link); err != nil {
			return nil, nil, err
		}
		return w.WritePacket, func() error { return nil }, nil
	}
	// Explicit section and interface options: the library defaults record
	// runtime.GOOS and GOARCH, which would make the bytes machine-dependent.
	intf := pcapgo.NgInterface{Name: "gen0", LinkType: c.link, TimestampResolution: 9, SnapLength: snapLen}
	opts := pcapgo.NgWriterOptions{SectionInfo: pcapgo.NgSectionInfo{Application: "warpflow testdata/gen"}}
	w, err := pcapgo.NewNgWriterInterface(out, intf, opts)
	if err != nil {
		return nil, nil, err
	}
	return w.WritePacket, w.Flush, nil
}

// snapLen is the snapshot length written in every file header.
const snapLen = 65535

// manifest renders one line per record: index, captured length, note.
func (c *capture) manifest() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# %s: index\tlength\tdescription (generated by testdata/gen; do not edit)\n", c.name)
	for i, r := range c.recs {
		fmt.Fprintf(&b, "%d\t%d\t%s\n", i, len(r.data), r.note)
	}
	return b.Bytes()
}
