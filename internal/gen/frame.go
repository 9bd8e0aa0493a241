package gen

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"

	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// Frame size limits, in bytes including the Ethernet header, excluding the
// FCS: 64 is the smallest Ethernet frame less its 4-byte FCS rounded to the
// usual benchmark size; 1518 is what a veth with MTU 1500 accepts (1500 +
// 14 + a VLAN tag's 4).
const (
	MinFrame = 64
	MaxFrame = 1518
	// MaxCaptureFrames bounds the frames taken from a capture.
	MaxCaptureFrames = 1 << 16
)

// UDPTemplate describes a synthetic IPv4/UDP frame.
type UDPTemplate struct {
	SrcMAC, DstMAC   net.HardwareAddr
	SrcIP, DstIP     netip.Addr
	SrcPort, DstPort uint16
	Size             int // whole frame, Ethernet header included, FCS excluded
}

// BuildUDP writes the frame into a new slice: Ethernet, IPv4 (TTL 64, DF,
// valid header checksum), UDP with a valid checksum, zero payload.
func BuildUDP(t UDPTemplate) ([]byte, error) {
	if t.Size < MinFrame || t.Size > MaxFrame {
		return nil, fmt.Errorf("frame size %d: want %d to %d bytes (Ethernet header included, FCS excluded)", t.Size, MinFrame, MaxFrame)
	}
	if len(t.SrcMAC) != 6 || len(t.DstMAC) != 6 {
		return nil, fmt.Errorf("frame macs %s -> %s: want 6-byte Ethernet addresses", t.SrcMAC, t.DstMAC)
	}
	if !t.SrcIP.Is4() || !t.DstIP.Is4() {
		return nil, fmt.Errorf("frame addresses %s -> %s: want IPv4", t.SrcIP, t.DstIP)
	}
	b := make([]byte, t.Size)
	copy(b[0:6], t.DstMAC)
	copy(b[6:12], t.SrcMAC)
	binary.BigEndian.PutUint16(b[12:14], 0x0800)
	ip := b[14:34]
	ipLen := t.Size - 14
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:4], uint16(ipLen))
	binary.BigEndian.PutUint16(ip[6:8], 0x4000) // DF
	ip[8] = 64
	ip[9] = 17
	src, dst := t.SrcIP.As4(), t.DstIP.As4()
	copy(ip[12:16], src[:])
	copy(ip[16:20], dst[:])
	binary.BigEndian.PutUint16(ip[10:12], ^fold(sum(ip, 0)))
	udp := b[34:]
	binary.BigEndian.PutUint16(udp[0:2], t.SrcPort)
	binary.BigEndian.PutUint16(udp[2:4], t.DstPort)
	binary.BigEndian.PutUint16(udp[4:6], uint16(len(udp)))
	SetUDPChecksum(b)
	return b, nil
}

// SetUDPChecksum recomputes the UDP checksum of an IPv4/UDP frame built by
// BuildUDP (20-byte IP header).
func SetUDPChecksum(b []byte) {
	ip, udp := b[14:34], b[34:]
	udp[6], udp[7] = 0, 0
	s := sum(ip[12:20], 0) + 17 + uint32(len(udp))
	c := ^fold(sum(udp, s))
	if c == 0 {
		c = 0xffff // 0 means "no checksum" in UDP over IPv4
	}
	binary.BigEndian.PutUint16(udp[6:8], c)
}

func sum(b []byte, s uint32) uint32 {
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	return s
}

func fold(s uint32) uint16 {
	for s > 0xffff {
		s = s>>16 + s&0xffff
	}
	return uint16(s)
}

// Flows returns n copies of frame whose UDP source port runs from the
// template's port up (port + i), each with its checksum recomputed.
func Flows(frame []byte, n int) [][]byte {
	base := binary.BigEndian.Uint16(frame[34:36])
	out := make([][]byte, n)
	for i := range out {
		f := append([]byte(nil), frame...)
		binary.BigEndian.PutUint16(f[34:36], base+uint16(i))
		SetUDPChecksum(f)
		out[i] = f
	}
	return out
}

// CaptureStats says what ReadCapture took and left.
type CaptureStats struct {
	Frames    int // frames taken
	TooShort  int // under 14 bytes, skipped
	TooLong   int // over MaxFrame, skipped
	Truncated int // captured shorter than on the wire (snaplen), skipped
	Beyond    int // past MaxCaptureFrames, not read
}

// ErrNoFrames: the capture has no frame that can be sent.
var ErrNoFrames = errors.New("capture has no sendable frame")

// ReadCapture reads the Ethernet frames of a pcap or pcapng file, in order,
// skipping (and counting) those that cannot be sent as they were captured.
func ReadCapture(path string) ([][]byte, CaptureStats, error) {
	var st CaptureStats
	f, err := os.Open(path)
	if err != nil {
		return nil, st, fmt.Errorf("open capture: %w", err)
	}
	defer f.Close()
	var next func() ([]byte, int, error) // data, wire length
	var lt layers.LinkType
	if r, err := pcapgo.NewReader(f); err == nil {
		lt = r.LinkType()
		next = func() ([]byte, int, error) {
			d, ci, err := r.ReadPacketData()
			return d, ci.Length, err
		}
	} else {
		if _, serr := f.Seek(0, io.SeekStart); serr != nil {
			return nil, st, fmt.Errorf("read capture %s: %w", path, serr)
		}
		r, nerr := pcapgo.NewNgReader(f, pcapgo.DefaultNgReaderOptions)
		if nerr != nil {
			return nil, st, fmt.Errorf("read capture %s: neither pcap (%v) nor pcapng (%v)", path, err, nerr)
		}
		lt = r.LinkType()
		next = func() ([]byte, int, error) {
			d, ci, err := r.ReadPacketData()
			return d, ci.Length, err
		}
	}
	if lt != layers.LinkTypeEthernet {
		return nil, st, fmt.Errorf("capture %s: link type %s, want Ethernet", path, lt)
	}
	var frames [][]byte
	for {
		d, wire, err := next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, st, fmt.Errorf("read capture %s: record %d: %w", path, st.Frames+st.TooShort+st.TooLong+st.Truncated+1, err)
		}
		switch {
		case len(d) < 14:
			st.TooShort++
		case len(d) > MaxFrame:
			st.TooLong++
		case wire > len(d):
			st.Truncated++
		case len(frames) == MaxCaptureFrames:
			st.Beyond++
		default:
			frames = append(frames, append([]byte(nil), d...))
		}
	}
	st.Frames = len(frames)
	if len(frames) == 0 {
		return nil, st, fmt.Errorf("%w: %s (%+v)", ErrNoFrames, path, st)
	}
	return frames, st, nil
}
