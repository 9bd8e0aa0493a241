package bench

import (
	"encoding/binary"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/warpflow/warpflow/pipelines"
	"github.com/warpflow/warpflow/rings"
)

// TestStatefulRow runs the stateful row small: every generated packet is
// transmitted (no flow lost, none refused), the steady phase allocates a
// handful at most, the table holds every flow in at most 128 bytes each;
// and the baseline row runs over the same generator.
func TestStatefulRow(t *testing.T) {
	const flows, steady = 20_000, 400_000
	r, err := statefulRow(statefulPipeline, flows, steady, -1)
	if err != nil {
		t.Fatal(err)
	}
	if r.Flows != flows || r.TableBytesPerFlow <= 0 || r.TableBytesPerFlow > 128 || r.Packets != steady {
		t.Fatalf("row %+v", r)
	}
	if r.Allocs > 16 {
		t.Fatalf("%d allocations in the steady phase of %d packets", r.Allocs, steady)
	}
	b, err := statefulRow(statefulBasePipeline(), flows, steady, -1)
	if err != nil || b.Packets != steady {
		t.Fatalf("baseline row %+v %v", b, err)
	}
}

// TestFlowPacketsParse: the generator's packets are what the parse stage
// and conntrack take as well-formed TCP and UDP with valid checksums.
func TestFlowPacketsParse(t *testing.T) {
	g, err := pipelines.Load("p.yaml", []byte(strings.Replace(statefulPipeline, "size: 1048576", "size: 1024", 1)))
	if err != nil {
		t.Fatal(err)
	}
	a, err := rings.NewArena(rings.ArenaOptions{Frames: 64, FrameSize: 2048, Headroom: 256})
	if err != nil {
		t.Fatal(err)
	}
	r := g.NewRunner(pipelines.RunnerOptions{})
	b := rings.NewBatch(8, a)
	for f := uint64(0); f < 4; f++ {
		for kind := uint64(0); kind < 5; kind++ {
			b.Clear()
			addr, _ := a.Alloc()
			n := writeFlowPacket(a.Frame(addr)[int(addr)&2047:], f, kind)
			b.Append(rings.Desc{Addr: addr, Len: uint32(n)}, 0, 0)
			r.Process(b)
			m := b.Meta[0]
			if m.Class != rings.ClassOK || m.Flags&rings.FlagL4 == 0 || m.CT&rings.CTStateMask == rings.CTInvalid || m.Verdict != rings.VerdictTX {
				t.Fatalf("flow %d kind %d: class %v flags %x ct %d", f, kind, m.Class, m.Flags, m.CT)
			}
			a.Free(addr)
		}
	}
}

// BenchmarkStatefulRows measures the stateful row and its baseline at
// full size, alternating (base, stateful, base, ...) so that both see the
// same stretches of a shared machine, and prints every run:
//
//	go test -run '^$' -bench StatefulRows -benchtime 5x ./internal/bench
//
// (-benchtime Nx: N runs of each row; the reported figures are the
// medians).
func BenchmarkStatefulRows(b *testing.B) {
	var base, st []float64
	cpu := runtime.NumCPU() - 1
	for b.Loop() {
		for _, c := range []struct {
			config string
			to     *[]float64
		}{{statefulBasePipeline(), &base}, {statefulPipeline, &st}} {
			r, err := onCPU(cpu, func() (Row, error) { return statefulRow(c.config, StatefulFlows, 20_000_000, DefaultGeneratorCPU(cpu)) })
			if err != nil {
				b.Fatal(err)
			}
			*c.to = append(*c.to, r.Mpps)
			b.Logf("%-8s %.2f Mpps %.1f ns/packet (%.1f ns of CPU) allocs %d bytes/flow %.1f", map[bool]string{true: "base", false: "stateful"}[c.to == &base], r.Mpps, r.NsPerPacket, r.CPUNsPerPacket, r.Allocs, r.TableBytesPerFlow)
		}
	}
	b.ReportMetric(medianOf(base), "base-Mpps")
	b.ReportMetric(medianOf(st), "stateful-Mpps")
	b.Logf("base %v\nstateful %v", base, st)
}

func medianOf(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// TestFlowPacketsMatch: the generator's packets, written from templates
// with checksums summed from their fields, are byte for byte the packets
// built in full (buildFlowPacket), for flows and kinds across the range.
func TestFlowPacketsMatch(t *testing.T) {
	for _, f := range []uint64{0, 1, 2, 3, 199, 200, 201, 65535, 65536, 999_998, 999_999, 1<<24 - 1} {
		for kind := uint64(0); kind < 5; kind++ {
			var got, want [60]byte
			writeFlowPacket(got[:], f, kind)
			buildFlowPacket(want[:], f, kind)
			if got != want {
				t.Fatalf("flow %d kind %d:\n got %x\nwant %x", f, kind, got, want)
			}
		}
	}
}

// writeFlowPacket writes packet kind of flow f into dst (60 bytes) as
// the port does (writeFlows for one packet) and returns its length.
func writeFlowPacket(dst []byte, f, kind uint64) int {
	desc := [1]rings.Desc{{Addr: 0}}
	writeFlows(dst, desc[:], f, 0, f+1, kind)
	return flowPacketLen
}

// buildFlowPacket builds packet kind of flow f field by field, both
// checksums summed over the whole header: the reference for the
// generator's templates.
func buildFlowPacket(d []byte, f, kind uint64) {
	be := binary.BigEndian
	// The flow's fields, as the row's comment describes them.
	tcp := f%2 == 0
	client := [4]byte{10, byte(f >> 16), byte(f >> 8), byte(f)}
	server := [4]byte{198, 51, 100, byte(1 + f%200)}
	cport, sport := uint16(1024+f/200), uint16(53)
	if tcp {
		sport = 80
	}
	src, dst, sp, dp := client, server, cport, sport
	if kind == 1 || kind == 4 {
		src, dst, sp, dp = server, [4]byte{192, 0, 2, 1}, sport, cport
	}
	cisn, sisn := uint32(f*2654435761), uint32(f*40503+7)
	var seq, ack uint32
	if tcp {
		seq, ack = [5]uint32{cisn, sisn, cisn + 1, cisn + 1, sisn + 1}[kind], [5]uint32{0, cisn + 1, sisn + 1, sisn + 1, cisn + 1}[kind]
	}
	clear(d[:60])
	if kind == 1 || kind == 4 {
		copy(d[0:6], flowMACs[0])
		copy(d[6:12], flowMACs[1])
	} else {
		copy(d[0:6], flowMACs[1])
		copy(d[6:12], flowMACs[0])
	}
	be.PutUint16(d[12:], 0x0800)
	ip, l4 := d[14:34], d[34:60]
	ip[0] = 0x45
	be.PutUint32(ip[4:], 0x00014000)
	ip[8] = 64
	copy(ip[12:16], src[:])
	copy(ip[16:20], dst[:])
	be.PutUint16(l4[0:], sp)
	be.PutUint16(l4[2:], dp)
	sum := func(b []byte) (s uint32) {
		for i := 0; i+1 < len(b); i += 2 {
			s += uint32(b[i])<<8 | uint32(b[i+1])
		}
		return s
	}
	pseudo := func(proto byte, n int) uint32 { return sum(ip[12:20]) + uint32(proto) + uint32(n) }
	if tcp {
		ip[9] = 6
		be.PutUint16(ip[2:], 40)
		be.PutUint32(l4[4:], seq)
		be.PutUint32(l4[8:], ack)
		l4[12], l4[13] = 5<<4, [5]byte{0x02, 0x12, 0x10, 0x10, 0x10}[kind]
		be.PutUint16(l4[14:], 65535)
		be.PutUint16(l4[16:], ^fold16(pseudo(6, 20)+sum(l4[:20])))
	} else {
		ip[9] = 17
		be.PutUint16(ip[2:], 46)
		be.PutUint16(l4[4:], 26)
		be.PutUint16(l4[6:], ^fold16(pseudo(17, 26)+sum(l4[:26])))
	}
	be.PutUint16(ip[10:], ^fold16(sum(ip)))
}

// TestFlowPortOrder: the port writes, byte for byte, the full builds of
// the packets (buildFlowPacket) in the row's order: every flow's three
// set-up packets in flow order, then in the steady phase every flow's
// client packet once in the scattered order ((j%flows)*stride%flows for
// steady packet j), then every server packet, and so on. The flow counts
// and batch sizes split the runs of one kind anywhere, and the flows go
// past the server count; every frame goes back to the arena.
func TestFlowPortOrder(t *testing.T) {
	for _, c := range []struct {
		flows, steady uint64
		batch         int
	}{{7, 40, 8}, {1, 5, 4}, {401, 3000, 48}, {1000, 5000, 64}} {
		a, err := rings.NewArena(rings.ArenaOptions{Frames: 64, FrameSize: 2048, Headroom: 256})
		if err != nil {
			t.Fatal(err)
		}
		p := newFlowPort(a, c.flows, c.steady)
		b := rings.NewBatch(c.batch, a)
		var i uint64
		for {
			b.Clear()
			n, err := p.Receive(b)
			if err != nil {
				break
			}
			for k := range n {
				f, kind := i%c.flows, i/c.flows
				if i >= p.warm {
					j := i - p.warm
					f, kind = (j%c.flows)*p.stride%c.flows, 3+(j/c.flows)%2
				}
				var want [60]byte
				buildFlowPacket(want[:], f, kind)
				if d := b.Descs[k]; d.Len != 60 || string(a.Mem()[d.Addr:d.Addr+60]) != string(want[:]) {
					t.Fatalf("%d flows, packet %d (flow %d kind %d): got %d bytes %x want %x", c.flows, i, f, kind, d.Len, a.Mem()[d.Addr:d.Addr+60], want)
				}
				i++
			}
			p.Recycle(b.Descs)
		}
		if i != 3*c.flows+c.steady || a.FreeFrames() != 64 {
			t.Fatalf("%d flows: %d packets, want %d; %d frames free, want 64", c.flows, i, 3*c.flows+c.steady, a.FreeFrames())
		}
	}
}

// fold16 folds a ones' complement sum to 16 bits, a carry at a time: the
// reference buildFlowPacket checks the generator's fold64 against.
func fold16(s uint32) uint16 {
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return uint16(s)
}
