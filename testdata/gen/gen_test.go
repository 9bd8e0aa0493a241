package main

import (
	"bytes"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// committed is where the checked-in outputs live, relative to this package.
const committed = "../captures"

// TestCommittedCapturesMatchGenerator regenerates every file into a temp
// dir and requires the committed tree to hold exactly those bytes: no
// drift, no missing and no stray files. Fix a failure by running
// `go run ./testdata/gen -out testdata/captures` and committing the result.
func TestCommittedCapturesMatchGenerator(t *testing.T) {
	dir := t.TempDir()
	if err := run(dir); err != nil {
		t.Fatal(err)
	}
	want := readTree(t, dir)
	got := readTree(t, committed)
	for name, w := range want {
		g, ok := got[name]
		switch {
		case !ok:
			t.Errorf("%s: generated but not committed", name)
		case !bytes.Equal(g, w):
			t.Errorf("%s: committed file differs from generator output (%d vs %d bytes)", name, len(g), len(w))
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("%s: committed but not generated", name)
		}
	}
}

func readTree(t *testing.T, root string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		files[filepath.ToSlash(rel)], err = os.ReadFile(path)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func TestGenerateIsDeterministic(t *testing.T) {
	a, err := generate()
	if err != nil {
		t.Fatal(err)
	}
	b, err := generate()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(slices.Sorted(mapKeys(a)), slices.Sorted(mapKeys(b))) {
		t.Fatal("file sets differ between runs")
	}
	for k := range a {
		if !bytes.Equal(a[k], b[k]) {
			t.Errorf("%s differs between runs", k)
		}
	}
}

func mapKeys(m map[string][]byte) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// readPcap returns the link type and packets of a classic pcap.
func readPcap(t *testing.T, data []byte) (layers.LinkType, [][]byte) {
	t.Helper()
	r, err := pcapgo.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for {
		d, _, err := r.ReadPacketData()
		if err == io.EOF {
			return r.LinkType(), out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, d)
	}
}

// TestMixedCoversEveryProtocol decodes mixed.pcap fully with gopacket: no
// packet may fail to decode or carry a bad checksum, and every protocol the
// parse stage handles must appear.
func TestMixedCoversEveryProtocol(t *testing.T) {
	c := buildMixed()
	data, err := c.encode()
	if err != nil {
		t.Fatal(err)
	}
	lt, pkts := readPcap(t, data)
	if lt != layers.LinkTypeEthernet || len(pkts) < 250 {
		t.Fatalf("link type %v, %d packets", lt, len(pkts))
	}
	seen := map[gopacket.LayerType]int{}
	var ttl1, vlan10, vlan20, qinq, v4opts, frag4first, frag4later int
	for i, d := range pkts {
		p := gopacket.NewPacket(d, layers.LayerTypeEthernet, gopacket.Default)
		if el := p.ErrorLayer(); el != nil {
			t.Errorf("packet %d (%s): %v", i, c.recs[i].note, el.Error())
			continue
		}
		for _, l := range p.Layers() {
			seen[l.LayerType()]++
			switch v := l.(type) {
			case *layers.IPv4:
				if v.TTL == 1 {
					ttl1++
				}
				if len(v.Options) > 0 {
					v4opts++
				}
				if v.Flags&layers.IPv4MoreFragments != 0 && v.FragOffset == 0 {
					frag4first++
				}
				if v.FragOffset != 0 {
					frag4later++
				}
			case *layers.Dot1Q:
				switch v.VLANIdentifier {
				case 10:
					vlan10++
				case 20:
					vlan20++
				case 100:
					qinq++
				}
			}
		}
		checkChecksums(t, i, p)
	}
	for _, lt := range []gopacket.LayerType{
		layers.LayerTypeTCP, layers.LayerTypeUDP, layers.LayerTypeDNS, layers.LayerTypeVXLAN,
		layers.LayerTypeGeneve, layers.LayerTypeGRE, layers.LayerTypeICMPv4, layers.LayerTypeICMPv6Echo,
		layers.LayerTypeICMPv6NeighborSolicitation, layers.LayerTypeARP, layers.LayerTypeDot1Q,
		layers.LayerTypeIPv6HopByHop, layers.LayerTypeIPv6Destination, layers.LayerTypeIPv6Fragment,
		layers.LayerTypeSCTP, layers.LayerTypeIPv6,
	} {
		if seen[lt] == 0 {
			t.Errorf("no %v layer in mixed.pcap", lt)
		}
	}
	for name, n := range map[string]int{"ttl=1": ttl1, "vlan 10": vlan10, "vlan 20": vlan20, "qinq outer 100": qinq,
		"ipv4 options": v4opts, "first fragment": frag4first, "non-first fragment": frag4later} {
		if n == 0 {
			t.Errorf("no %s packet in mixed.pcap", name)
		}
	}
}

// checkChecksums verifies every checksum gopacket can check (IPv4, TCP,
// UDP, ICMPv4, ICMPv6, GRE), tunnelled ones included.
func checkChecksums(t *testing.T, i int, p gopacket.Packet) {
	t.Helper()
	var netLayer gopacket.NetworkLayer
	for _, l := range p.Layers() {
		switch x := l.(type) {
		case *layers.IPv4:
			netLayer = x
		case *layers.IPv6:
			netLayer = x
		case *layers.TCP:
			_ = x.SetNetworkLayerForChecksum(netLayer)
		case *layers.UDP:
			_ = x.SetNetworkLayerForChecksum(netLayer)
		case *layers.ICMPv6:
			_ = x.SetNetworkLayerForChecksum(netLayer)
		}
		v, ok := l.(interface {
			VerifyChecksum() (error, gopacket.ChecksumVerificationResult)
		})
		if !ok {
			continue
		}
		err, res := v.VerifyChecksum()
		if err != nil || !res.Valid {
			t.Errorf("packet %d: %v checksum %#x, want %#x (%v)", i, l.LayerType(), res.Actual, res.Correct, err)
		}
	}
}

func TestMalformedPacketsAreBroken(t *testing.T) {
	c := buildMalformed()
	if c.err != nil {
		t.Fatal(c.err)
	}
	if len(c.recs) < 13 {
		t.Fatalf("%d malformed packets, want one per class", len(c.recs))
	}
	for i, r := range c.recs {
		if r.note == "" {
			t.Errorf("packet %d has no description", i)
		}
	}
}

func TestBenchCaptures(t *testing.T) {
	for _, tcp := range []bool{false, true} {
		c := buildBench(tcp)
		data, err := c.encode()
		if err != nil {
			t.Fatal(err)
		}
		_, pkts := readPcap(t, data)
		if len(pkts) != benchPackets {
			t.Fatalf("%s: %d packets", c.name, len(pkts))
		}
		flows := map[string]bool{}
		for i, d := range pkts {
			if len(d) != benchFrame {
				t.Fatalf("%s packet %d: %d bytes", c.name, i, len(d))
			}
			p := gopacket.NewPacket(d, layers.LayerTypeEthernet, gopacket.Default)
			if p.ErrorLayer() != nil || p.TransportLayer() == nil {
				t.Fatalf("%s packet %d does not decode", c.name, i)
			}
			flows[p.NetworkLayer().NetworkFlow().String()+p.TransportLayer().TransportFlow().String()] = true
		}
		if len(flows) != benchFlows {
			t.Errorf("%s: %d flows, want %d", c.name, len(flows), benchFlows)
		}
	}
}

// TestLinktypesCarrySameIPPackets strips each file's link header and
// compares what is left with the shared packets.
func TestLinktypesCarrySameIPPackets(t *testing.T) {
	caps, shared := buildLinktypes()
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	hdrLen := map[layers.LinkType]int{ethLinkID: 14, linkRaw: 0, linkIPv4: 0, linkIPv6: 0, linkSLL: 16, linkSLL2: 20, linkNull: 4, linkLoop: 4,
		linkPPPHDLC: 4, linkPPPPPPD: 4, linkCHDLC: 4, link80211: 32}
	for _, c := range caps {
		data, err := c.encode()
		if err != nil {
			t.Fatal(err)
		}
		if c.ng {
			r, err := pcapgo.NewNgReader(bytes.NewReader(data), pcapgo.DefaultNgReaderOptions)
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			n := 0
			for {
				_, _, err := r.ReadPacketData()
				if err != nil {
					break
				}
				n++
			}
			if n != len(shared.recs) {
				t.Errorf("%s: %d packets, want %d", c.name, n, len(shared.recs))
			}
			continue
		}
		lt, pkts := readPcap(t, data)
		if lt != c.link {
			t.Errorf("%s: link type %d, want %d", c.name, lt, c.link)
		}
		want := shared.recs
		switch {
		case strings.Contains(c.name, "228"):
			want = want[:6]
		case strings.Contains(c.name, "229"):
			want = want[6:]
		case strings.Contains(c.name, "unsupported"):
			want = want[:1]
		}
		if len(pkts) != len(want) {
			t.Fatalf("%s: %d packets, want %d", c.name, len(pkts), len(want))
		}
		for i, d := range pkts {
			hl := hdrLen[lt]
			if lt == linkPPP { // framed, unframed and compressed rotate
				hl = []int{4, 2, 1}[i%3]
			}
			if len(d) < hl || !bytes.Equal(d[hl:], want[i].data[ethLen:]) {
				t.Errorf("%s packet %d: ip bytes differ", c.name, i)
			}
		}
	}
}
