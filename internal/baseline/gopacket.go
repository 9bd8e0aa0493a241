package baseline

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// ErrUnsupportedLinkType is returned for a capture whose link type is not
// Ethernet: the gopacket baseline decodes from an Ethernet header only.
var ErrUnsupportedLinkType = errors.New("unsupported link type")

// packetReader is what pcapgo's classic and pcapng readers have in common.
type packetReader interface {
	ZeroCopyReadPacketData() ([]byte, gopacket.CaptureInfo, error)
	LinkType() layers.LinkType
}

// newReader opens a classic pcap or, failing that, a pcapng stream.
func newReader(data []byte) (packetReader, error) {
	r, err := pcapgo.NewReader(bytes.NewReader(data))
	if err == nil {
		return r, nil
	}
	ng, ngErr := pcapgo.NewNgReader(bytes.NewReader(data), pcapgo.DefaultNgReaderOptions)
	if ngErr != nil {
		return nil, fmt.Errorf("open capture: %w", err)
	}
	return ng, nil
}

// parser is the obvious gopacket program's state: one DecodingLayerParser
// with preallocated layers, reused for every packet.
type parser struct {
	eth     layers.Ethernet
	dot1q   layers.Dot1Q
	ip4     layers.IPv4
	ip6     layers.IPv6
	tcp     layers.TCP
	udp     layers.UDP
	dlp     *gopacket.DecodingLayerParser
	decoded []gopacket.LayerType
	sum     uint64 // fold of the 5-tuples, so the decode cannot be elided
}

func newParser() *parser { return newParserWith(nil) }

// newParserWith builds the parser with the given decoding layer container
// (nil: NewDecodingLayerParser's default, a map).
func newParserWith(container gopacket.DecodingLayerContainer) *parser {
	p := &parser{decoded: make([]gopacket.LayerType, 0, 8)}
	p.dlp = gopacket.NewDecodingLayerParser(layers.LayerTypeEthernet)
	if container != nil {
		p.dlp.SetDecodingLayerContainer(container)
	}
	for _, l := range []gopacket.DecodingLayer{&p.eth, &p.dot1q, &p.ip4, &p.ip6, &p.tcp, &p.udp} {
		p.dlp.AddDecodingLayer(l)
	}
	p.dlp.IgnoreUnsupported = true
	return p
}

// parse decodes one frame and folds its 5-tuple into p.sum. Decode errors
// (truncated or malformed frames) are ignored, as the obvious program
// would: the layers decoded before the error are still touched.
func (p *parser) parse(data []byte) {
	_ = p.dlp.DecodeLayers(data, &p.decoded)
	var h uint64
	for _, lt := range p.decoded {
		switch lt {
		case layers.LayerTypeIPv4:
			h += uint64(binary.BigEndian.Uint32(p.ip4.SrcIP))<<32 | uint64(binary.BigEndian.Uint32(p.ip4.DstIP))
			h += uint64(p.ip4.Protocol)
		case layers.LayerTypeIPv6:
			h += binary.BigEndian.Uint64(p.ip6.SrcIP[8:]) ^ binary.BigEndian.Uint64(p.ip6.DstIP[8:])
			h += uint64(p.ip6.NextHeader)
		case layers.LayerTypeTCP:
			h += uint64(p.tcp.SrcPort)<<16 | uint64(p.tcp.DstPort)
		case layers.LayerTypeUDP:
			h += uint64(p.udp.SrcPort)<<16 | uint64(p.udp.DstPort)
		}
	}
	p.sum = p.sum*31 + h
}

// sink keeps the last fold alive past the timed loop: it is written, never
// read, by design.
//
//lint:ignore U1000 a benchmark sink is only ever stored to.
var sink uint64

// loadCapture reads a whole capture file and checks it is Ethernet.
func loadCapture(path string) ([]byte, packetReader, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("read capture: %w", err)
	}
	r, err := newReader(data)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	if lt := r.LinkType(); lt != layers.LinkTypeEthernet {
		return nil, nil, fmt.Errorf("%s: link type %d: %w", path, lt, ErrUnsupportedLinkType)
	}
	return data, r, nil
}

// GopacketParse measures decode only, as a preloaded replay would see it:
// it reads every packet of the capture at path into memory once, outside
// the timed region, then times loops passes of one DecodingLayerParser
// (Ethernet, Dot1Q, IPv4, IPv6, TCP, UDP; IgnoreUnsupported) over all of
// them, touching each decoded 5-tuple.
func GopacketParse(path string, loops int) (Result, error) {
	return gopacketParse(path, loops, newParser())
}

// GopacketParseSparse is GopacketParse with the parser's decoding layers
// held in gopacket's DecodingLayerSparse container instead of the default
// map: gopacket documents it as the fastest container, and it is the
// strongest gopacket decode we know how to write.
func GopacketParseSparse(path string, loops int) (Result, error) {
	return gopacketParse(path, loops, newParserWith(gopacket.DecodingLayerSparse(nil)))
}

func gopacketParse(path string, loops int, p *parser) (Result, error) {
	if loops < 1 {
		return Result{}, fmt.Errorf("gopacket baseline: loops %d, want at least 1", loops)
	}
	_, r, err := loadCapture(path)
	if err != nil {
		return Result{}, err
	}
	pkts, err := readAll(r)
	if err != nil {
		return Result{}, fmt.Errorf("%s %w", path, err)
	}
	start := time.Now()
	for range loops {
		for _, d := range pkts {
			p.parse(d)
		}
	}
	elapsed := time.Since(start)
	sink = p.sum
	return newResult(uint64(loops)*uint64(len(pkts)), elapsed), nil
}

// GopacketParseReader measures the whole "read + parse" program: each of
// the loops passes opens a pcapgo reader over the file's bytes (held in
// memory, so no disk I/O is timed), reads every record with
// ZeroCopyReadPacketData and decodes it as GopacketParse does.
func GopacketParseReader(path string, loops int) (Result, error) {
	if loops < 1 {
		return Result{}, fmt.Errorf("gopacket baseline: loops %d, want at least 1", loops)
	}
	data, _, err := loadCapture(path)
	if err != nil {
		return Result{}, err
	}
	p := newParser()
	var n uint64
	start := time.Now()
	for range loops {
		r, err := newReader(data)
		if err != nil {
			return Result{}, fmt.Errorf("%s: %w", path, err)
		}
		for {
			d, _, err := r.ZeroCopyReadPacketData()
			if err == io.EOF {
				break
			}
			if err != nil {
				return Result{}, fmt.Errorf("%s packet %d: %w", path, n, err)
			}
			p.parse(d)
			n++
		}
	}
	elapsed := time.Since(start)
	sink = p.sum
	return newResult(n, elapsed), nil
}

// readAll reads every packet r has, each copied out of the reader's buffer.
func readAll(r packetReader) ([][]byte, error) {
	var pkts [][]byte
	for {
		d, _, err := r.ZeroCopyReadPacketData()
		if err == io.EOF {
			return pkts, nil
		}
		if err != nil {
			return pkts, fmt.Errorf("packet %d: %w", len(pkts), err)
		}
		pkts = append(pkts, bytes.Clone(d))
	}
}
