package bench

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"runtime"
	"time"

	"github.com/warpflow/warpflow/dataplane"
	"github.com/warpflow/warpflow/internal/benchshape"
	"github.com/warpflow/warpflow/pipelines"
	"github.com/warpflow/warpflow/rings"
)

// The stateful row: parse, conntrack, a ct-matching filter, SNAT and tx
// over 64-byte TCP and UDP packets of a million concurrent flows, on one
// core, next to the stateless default shape over the same packets.
//
// A capture cannot hold that load: a million flows in both directions is
// two million frames (4 GB of arena), and NAT rewrites packets in place,
// so a looped preload would send translated packets round again. The rows
// get their packets from flowPort instead, a generator port that writes
// each packet into a fresh frame as a NIC would (a 60-byte template, the
// flow's addresses, ports and sequence numbers, both checksums in full),
// flows in a scattered order so that every packet's table entry is a
// cache miss, as it is for real traffic over a table this size. The
// generator's own cost is in both rows alike.
//
// The flows are set up first (TCP handshakes, a UDP exchange each) and
// then measured in steady state: every TCP flow's packets are in-window
// ACKs both ways, every UDP flow's datagrams both ways; the NAT keeps each
// client's port (unique per server), so the generator knows the replies'
// translated destination. The row fails unless every measured packet was
// transmitted: a lost flow would show as invalid (loose pickup is off)
// and be dropped.

// RowStateful and RowStatefulBase name the two rows.
const (
	RowStateful     = "warpflow stateful: parse, conntrack, ct filter, SNAT (1M flows) -> null"
	RowStatefulBase = "warpflow default shape (1000 rules) on the same generated flows -> null"
)

// StatefulFlows is the number of concurrent flows of the stateful rows.
const StatefulFlows = 1_000_000

const statefulPipeline = `
name: bench-stateful
stages:
  - {name: parse, type: parse}
  - {name: ct, type: conntrack, size: 1048576}
  - name: acl
    type: filter
    rules:
      - {ct: invalid, action: "drop:invalid"}
      - {ct: new, proto: tcp, dst_port: 23, action: "drop:telnet"}
  - {name: nat, type: nat, conntrack: ct, snat: [{match: {src: 10.0.0.0/8}, to: 192.0.2.1}]}
  - {name: out, type: tx, port: sink}
`

var (
	flowNAT    = [4]byte{192, 0, 2, 1}
	flowMACs   = [2]net.HardwareAddr{{0x02, 0, 0, 0, 0, 0xa}, {0x02, 0, 0, 0, 0, 0xb}}
	flowServer = 200 // servers 198.51.100.1..200
)

// flowPort generates the stateful rows' packets.
type flowPort struct {
	a     *rings.Arena
	mem   []byte
	flows uint64
	// warm is the setup packets (three per flow), steady the measured
	// ones after them; next is the next packet number.
	warm, steady, next uint64
	seq                uint64
	stride             uint64 // coprime with flows: scatters the flow order
	start              time.Time
	elapsed            time.Duration
	ms0, ms1           runtime.MemStats
}

func newFlowPort(a *rings.Arena, flows, steady uint64) *flowPort {
	p := &flowPort{a: a, mem: a.Mem(), flows: flows, warm: 3 * flows, steady: steady, stride: 2654435761 % flows}
	for gcd(p.stride, flows) != 1 {
		p.stride++
	}
	return p
}

func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

func (p *flowPort) Name() string { return "flowgen" }
func (p *flowPort) Transmit(*rings.Arena, []rings.Desc) (int, error) {
	return 0, dataplane.ErrNotTransmitter
}
func (p *flowPort) Close() error { return nil }
func (p *flowPort) Recycle(descs []rings.Desc) {
	for _, d := range descs {
		p.a.Free(d.Addr)
	}
}

// Receive writes up to a batch of packets.
func (p *flowPort) Receive(b *rings.Batch) (int, error) {
	total := p.warm + p.steady
	if p.next >= total {
		if p.elapsed == 0 {
			p.elapsed = time.Since(p.start)
			runtime.ReadMemStats(&p.ms1)
		}
		return 0, io.EOF
	}
	if p.next == p.warm {
		runtime.ReadMemStats(&p.ms0)
		p.start = time.Now()
	}
	b.SetTime(1_000_000) // one instant: nothing expires during the run
	n := 0
	end := total
	if p.next < p.warm {
		end = p.warm // the steady phase starts on a batch of its own
	}
	for len(b.Descs) < cap(b.Descs) && p.next < end {
		addr, ok := p.a.Alloc()
		if !ok {
			break
		}
		i := p.next
		var f, kind uint64
		if i < p.warm {
			f, kind = i%p.flows, i/p.flows // 0: first, 1: reply, 2: third
		} else {
			j := i - p.warm
			f, kind = (j%p.flows)*p.stride%p.flows, 3+(j/p.flows)%2 // 3: client's, 4: server's
		}
		l := writeFlowPacket(p.mem[addr:addr+60], f, kind)
		b.Append(rings.Desc{Addr: addr, Len: uint32(l)}, p.seq, 0)
		p.seq++
		p.next++
		n++
	}
	return n, nil
}

// writeFlowPacket writes packet kind of flow f into dst (60 bytes) and
// returns its length. Even flows are TCP, odd UDP.
func writeFlowPacket(dst []byte, f, kind uint64) int {
	be := binary.BigEndian
	tcp := f%2 == 0
	client := [4]byte{10, byte(f >> 16), byte(f >> 8), byte(f)}
	server := [4]byte{198, 51, 100, byte(1 + f%uint64(flowServer))}
	cport := uint16(1024 + f/uint64(flowServer))
	sport := uint16(53)
	if tcp {
		sport = 80
	}
	cisn, sisn := uint32(f*2654435761), uint32(f*40503+7)
	reply := kind == 1 || kind == 4
	src, dst4, sp, dp := client, server, cport, sport
	if reply {
		src, dst4, sp, dp = server, flowNAT, sport, cport
	}
	d := dst[:60]
	if reply {
		copy(d[0:6], flowMACs[0])
		copy(d[6:12], flowMACs[1])
	} else {
		copy(d[0:6], flowMACs[1])
		copy(d[6:12], flowMACs[0])
	}
	be.PutUint16(d[12:], 0x0800)
	ip := d[14:34]
	ip[0], ip[1] = 0x45, 0
	be.PutUint16(ip[2:], 46)
	be.PutUint32(ip[4:], 0x00014000) // id 1, DF
	ip[8], ip[10], ip[11] = 64, 0, 0
	copy(ip[12:16], src[:])
	copy(ip[16:20], dst4[:])
	l4 := d[34:60]
	clear(l4)
	be.PutUint16(l4[0:], sp)
	be.PutUint16(l4[2:], dp)
	if tcp {
		ip[9] = 6
		var flags byte
		var seq, ack uint32
		switch kind {
		case 0:
			flags, seq = 0x02, cisn // SYN
		case 1:
			flags, seq, ack = 0x12, sisn, cisn+1 // SYN/ACK
		case 2, 3:
			flags, seq, ack = 0x10, cisn+1, sisn+1 // ACK
		case 4:
			flags, seq, ack = 0x10, sisn+1, cisn+1
		}
		be.PutUint32(l4[4:], seq)
		be.PutUint32(l4[8:], ack)
		l4[12], l4[13] = 5<<4, flags
		be.PutUint16(l4[14:], 65535)
		// 6 bytes of padding to the 60-byte frame: not part of the segment.
		be.PutUint16(ip[2:], 40)
		be.PutUint16(l4[16:], ^fold16(pseudo(ip, 6, 20)+sum16(l4[:20])))
	} else {
		ip[9] = 17
		be.PutUint16(l4[4:], 26)
		be.PutUint16(l4[6:], ^fold16(pseudo(ip, 17, 26)+sum16(l4[:26])))
	}
	be.PutUint16(ip[10:], ^fold16(sum16(ip)))
	return 60
}

// sum16 is the ones'-complement sum of b's 16-bit words (even length),
// not yet folded: four words a load, so that writing packets costs the
// rows little beside what they measure.
func sum16(b []byte) uint32 {
	var s uint64
	for len(b) >= 8 {
		v := binary.BigEndian.Uint64(b)
		s += v>>48 + v>>32&0xffff + v>>16&0xffff + v&0xffff
		b = b[8:]
	}
	for len(b) >= 2 {
		s += uint64(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	return uint32(s) // the rows sum a few dozen words: no carry out
}

func pseudo(ip []byte, proto byte, n int) uint32 {
	return sum16(ip[12:20]) + uint32(proto) + uint32(n)
}

func fold16(s uint32) uint16 {
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return uint16(s)
}

// statefulRow runs config over flows flows, steady packets measured,
// inline on the calling (pinned) thread. It reports the steady phase's
// rate and allocations and, for a pipeline with a conntrack stage, the
// table's memory per flow.
func statefulRow(config string, flows, steady uint64) (Row, error) {
	g, err := pipelines.Load("bench", []byte(config))
	if err != nil {
		return Row{}, fmt.Errorf("bench pipeline: %w", err)
	}
	a, err := rings.NewArena(rings.ArenaOptions{Frames: 1024, FrameSize: 2048, Headroom: 256})
	if err != nil {
		return Row{}, err
	}
	in := newFlowPort(a, flows, steady)
	sink := dataplane.NewNullPort("sink")
	o := dataplane.DefaultOptions()
	o.Workers, o.Timing = 0, false
	e, err := dataplane.NewEngine(g, a, in, dataplane.Outputs{Ports: map[string]dataplane.Port{"sink": sink}}, o)
	if err != nil {
		return Row{}, err
	}
	if err := e.Run(nil); err != nil {
		return Row{}, err
	}
	rep := e.Report()
	if !rep.Balanced {
		return Row{}, fmt.Errorf("%s", rep.AccountingLine())
	}
	if rep.Transmitted != in.warm+in.steady {
		return Row{}, fmt.Errorf("%d of %d packets transmitted (%v): flows lost their state or were refused", rep.Transmitted, in.warm+in.steady, rep.Drops)
	}
	row := Row{
		Packets:     in.steady,
		Mpps:        float64(in.steady) / in.elapsed.Seconds() / 1e6,
		NsPerPacket: float64(in.elapsed.Nanoseconds()) / float64(in.steady),
		Allocs:      in.ms1.Mallocs - in.ms0.Mallocs,
	}
	if res, err := e.Flows(context.Background(), dataplane.FlowQuery{}); err == nil {
		if res.Entries != int(flows) {
			return Row{}, fmt.Errorf("%d flows in the table, want %d", res.Entries, flows)
		}
		row.Flows, row.TableBytesPerFlow = res.Entries, float64(res.Bytes)/float64(res.Capacity)
	}
	return row, nil
}

func statefulBasePipeline() string {
	return benchshape.Default("bench-default-1k", 1000)
}
