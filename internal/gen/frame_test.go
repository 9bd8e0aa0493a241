package gen

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
	"github.com/warpflow/warpflow/internal/lab"
)

func template(size int) UDPTemplate {
	return UDPTemplate{SrcMAC: lab.GenMAC, DstMAC: lab.DP0MAC, SrcIP: lab.GenAddr.Addr(), DstIP: lab.SinkAddr.Addr(),
		SrcPort: 1024, DstPort: 9, Size: size}
}

// TestBuildUDP decodes the frames with gopacket and checks every field and
// both checksums against gopacket's own serialisation.
func TestBuildUDP(t *testing.T) {
	for _, size := range []int{MinFrame, 65, 128, 1000, MaxFrame} {
		f, err := BuildUDP(template(size))
		if err != nil {
			t.Fatal(err)
		}
		if len(f) != size {
			t.Fatalf("size %d: built %d bytes", size, len(f))
		}
		p := gopacket.NewPacket(f, layers.LayerTypeEthernet, gopacket.Default)
		eth, _ := p.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
		ip, _ := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
		udp, _ := p.Layer(layers.LayerTypeUDP).(*layers.UDP)
		if eth == nil || ip == nil || udp == nil {
			t.Fatalf("size %d: decode: %v", size, p.ErrorLayer())
		}
		if eth.SrcMAC.String() != lab.GenMAC.String() || eth.DstMAC.String() != lab.DP0MAC.String() ||
			ip.SrcIP.String() != "198.18.0.1" || ip.DstIP.String() != "198.19.0.1" || ip.TTL != 64 ||
			int(ip.Length) != size-14 || udp.SrcPort != 1024 || udp.DstPort != 9 || int(udp.Length) != size-34 {
			t.Errorf("size %d: fields %v %v %v", size, eth, ip, udp)
		}
		// Reserialise with gopacket computing the checksums.
		buf := gopacket.NewSerializeBuffer()
		ip2, udp2 := *ip, *udp
		udp2.SetNetworkLayerForChecksum(&ip2)
		err = gopacket.SerializeLayers(buf, gopacket.SerializeOptions{ComputeChecksums: true, FixLengths: true},
			eth, &ip2, &udp2, gopacket.Payload(udp.Payload))
		if err != nil {
			t.Fatal(err)
		}
		if want := buf.Bytes(); string(want) != string(f) {
			t.Errorf("size %d: checksums differ from gopacket's: ip %#x/%#x udp %#x/%#x", size,
				binary.BigEndian.Uint16(f[24:]), binary.BigEndian.Uint16(want[24:]),
				binary.BigEndian.Uint16(f[40:]), binary.BigEndian.Uint16(want[40:]))
		}
	}
	for _, bad := range []UDPTemplate{template(63), template(1519),
		{SrcMAC: lab.GenMAC, DstMAC: lab.DP0MAC, SrcIP: netip.MustParseAddr("::1"), DstIP: lab.SinkAddr.Addr(), Size: 64},
		{SrcMAC: lab.GenMAC[:4], DstMAC: lab.DP0MAC, SrcIP: lab.GenAddr.Addr(), DstIP: lab.SinkAddr.Addr(), Size: 64}} {
		if _, err := BuildUDP(bad); err == nil {
			t.Errorf("BuildUDP(%+v): want an error", bad)
		}
	}
}

func TestFlows(t *testing.T) {
	f, err := BuildUDP(template(100))
	if err != nil {
		t.Fatal(err)
	}
	fs := Flows(f, 300)
	for i, g := range fs {
		p := gopacket.NewPacket(g, layers.LayerTypeEthernet, gopacket.Default)
		udp, _ := p.Layer(layers.LayerTypeUDP).(*layers.UDP)
		if udp == nil || int(udp.SrcPort) != 1024+i {
			t.Fatalf("flow %d: %v", i, udp)
		}
		want := append([]byte(nil), g...)
		SetUDPChecksum(want)
		if string(want) != string(g) {
			t.Errorf("flow %d: checksum not recomputed", i)
		}
	}
	if string(fs[0]) != string(f) {
		t.Error("flow 0 differs from the template")
	}
}

func TestReadCapture(t *testing.T) {
	frames, st, err := ReadCapture("../../testdata/captures/mixed.pcap")
	if err != nil {
		t.Fatal(err)
	}
	if len(frames) == 0 || st.Frames != len(frames) {
		t.Fatalf("mixed.pcap: %d frames, %+v", len(frames), st)
	}
	// Against pcapgo directly: same frames, same order.
	fh, err := os.Open("../../testdata/captures/mixed.pcap")
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	r, err := pcapgo.NewReader(fh)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		d, _, err := r.ReadPacketData()
		if err != nil {
			if i != len(frames) {
				t.Errorf("pcapgo read %d frames, ReadCapture %d", i, len(frames))
			}
			break
		}
		if i < len(frames) && string(d) != string(frames[i]) {
			t.Errorf("frame %d differs", i)
		}
	}

	// pcapng: the same frames as its pcap twin.
	a, _, err := ReadCapture("../../testdata/captures/linktypes/ethernet.pcap")
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := ReadCapture("../../testdata/captures/linktypes/ethernet.pcapng")
	if err != nil {
		t.Fatal(err)
	}
	if len(a) != len(b) || string(a[0]) != string(b[0]) {
		t.Errorf("ethernet.pcap has %d frames, ethernet.pcapng %d, or they differ", len(a), len(b))
	}
	for _, bad := range []string{"corrupt-magic.pcap", "empty.pcap", "truncated-record.pcap"} {
		if _, _, err := ReadCapture("../../testdata/captures/bad/" + bad); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}

	dir := t.TempDir()
	write := func(name string, lt layers.LinkType, recs ...[]byte) string {
		p := filepath.Join(dir, name)
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		w := pcapgo.NewWriter(f)
		if err := w.WriteFileHeader(65535, lt); err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			if err := w.WritePacket(gopacket.CaptureInfo{CaptureLength: len(r), Length: len(r)}, r); err != nil {
				t.Fatal(err)
			}
		}
		f.Close()
		return p
	}
	good, _ := BuildUDP(template(64))
	p := write("skips.pcap", layers.LinkTypeEthernet, good, make([]byte, 10), make([]byte, 2000), good)
	frames, st, err = ReadCapture(p)
	if err != nil || len(frames) != 2 || st.TooShort != 1 || st.TooLong != 1 {
		t.Errorf("skips.pcap: %d frames, %+v, %v", len(frames), st, err)
	}
	p = write("empty.pcap", layers.LinkTypeEthernet, make([]byte, 5))
	if _, _, err := ReadCapture(p); !errors.Is(err, ErrNoFrames) {
		t.Errorf("empty.pcap: %v, want ErrNoFrames", err)
	}
	p = write("raw.pcap", layers.LinkTypeRaw, good)
	if _, _, err := ReadCapture(p); err == nil || !strings.Contains(err.Error(), "link type") {
		t.Errorf("raw.pcap: %v, want a link type error", err)
	}
	if _, _, err := ReadCapture(filepath.Join(dir, "missing.pcap")); err == nil {
		t.Error("missing file: no error")
	}
	garbage := filepath.Join(dir, "garbage.pcap")
	os.WriteFile(garbage, []byte("this is not a capture at all"), 0o644)
	if _, _, err := ReadCapture(garbage); err == nil {
		t.Error("garbage file: no error")
	}
}

func TestOptionsValidate(t *testing.T) {
	ok := DefaultOptions()
	if err := ok.validate(); err != nil {
		t.Fatal(err)
	}
	for name, mod := range map[string]func(*Options){
		"no iface":   func(o *Options) { o.Interface = "" },
		"count 0":    func(o *Options) { o.Count = 0 },
		"duration 0": func(o *Options) { o.Duration = 0 },
		"rate < 0":   func(o *Options) { o.Rate = -1 },
		"flows 0":    func(o *Options) { o.Flows = 0 },
		"ports wrap": func(o *Options) { o.SrcPort, o.Flows = 65000, 1000 },
		"queue < 0":  func(o *Options) { o.Queue = -1 },
		"engine":     func(o *Options) { o.Engine = 9 },
	} {
		o := DefaultOptions()
		mod(&o)
		if err := o.validate(); err == nil {
			t.Errorf("%s: want an error", name)
		}
	}
	if _, err := ParseEngine("dpdk"); err == nil {
		t.Error("ParseEngine(dpdk): no error")
	}
	for _, e := range []Engine{EngineLive, EngineAFXDP} {
		if got, err := ParseEngine(e.String()); err != nil || got != e {
			t.Errorf("ParseEngine(%s) = %v, %v", e, got, err)
		}
	}
}

func TestWarnings(t *testing.T) {
	r := Result{Engine: "live", Interface: "gen0", Sent: 100, IfaceTXPackets: 0}
	if w := warnings(r); len(w) != 1 || !strings.Contains(w[0], "vanished") {
		t.Errorf("vanished frames: %q", w)
	}
	r.IfaceTXPackets, r.IfaceTXDropped = 90, 10
	if w := warnings(r); len(w) != 1 || !strings.Contains(w[0], "dropped 10") {
		t.Errorf("dropped frames: %q", w)
	}
	r.IfaceTXPackets, r.IfaceTXDropped = 100, 0
	r.Rate, r.PPS, r.Stopped = 1000, 900, "duration"
	if w := warnings(r); len(w) != 1 || !strings.Contains(w[0], "achieved 900") {
		t.Errorf("slow run: %q", w)
	}
	r.PPS = 999
	if w := warnings(r); len(w) != 0 {
		t.Errorf("clean run: %q", w)
	}
}
