package bench

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"runtime"
	"syscall"
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
	flowNAT  = [4]byte{192, 0, 2, 1}
	flowMACs = [2]net.HardwareAddr{{0x02, 0, 0, 0, 0, 0xa}, {0x02, 0, 0, 0, 0, 0xb}}
)

// flowServers is the number of servers (198.51.100.1..200); a constant,
// so that the generator's divisions by it are multiplications.
const flowServers = 200

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
	// cur is the steady phase's next flow ((j%flows)*stride%flows for
	// steady packet j, kept by addition) and kind its packet kind.
	// left counts down the packets to the next change of kind.
	cur, kind, left uint64
	start           time.Time
	elapsed         time.Duration
	ms0, ms1        runtime.MemStats
	// addrs and descs are Receive's scratch: a batch's frames and
	// descriptors.
	addrs [rings.MaxBatch]uint64
	descs [rings.MaxBatch]rings.Desc
	// cpu0 and cpuElapsed: the thread's CPU time, beside the wall time
	// (on a shared machine the thread is not always on its core).
	cpu0, cpuElapsed time.Duration
}

func newFlowPort(a *rings.Arena, flows, steady uint64) *flowPort {
	p := &flowPort{a: a, mem: a.Mem(), flows: flows, warm: 3 * flows, steady: steady, stride: 2654435761 % flows, kind: 3, left: flows}
	for gcd(p.stride, flows) != 1 {
		p.stride++
	}
	if flows == 1 {
		p.stride = 0
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
func (p *flowPort) Close() error               { return nil }
func (p *flowPort) Recycle(descs []rings.Desc) { p.a.FreeDescs(descs) }

// Receive writes up to a batch of packets.
func (p *flowPort) Receive(b *rings.Batch) (int, error) {
	total := p.warm + p.steady
	if p.next >= total {
		if p.elapsed == 0 {
			p.elapsed = time.Since(p.start)
			p.cpuElapsed = threadCPU() - p.cpu0
			runtime.ReadMemStats(&p.ms1)
		}
		return 0, io.EOF
	}
	if p.next == p.warm {
		runtime.ReadMemStats(&p.ms0)
		p.start = time.Now()
		p.cpu0 = threadCPU()
	}
	b.SetTime(1_000_000) // one instant: nothing expires during the run
	end := total
	if p.next < p.warm {
		end = p.warm // the steady phase starts on a batch of its own
	}
	// The frames first, then the packets, then one run into the batch
	// (one bulk clear of the metadata, as a NIC port hands over a run of
	// descriptors).
	want := int(min(uint64(cap(b.Descs)-len(b.Descs)), end-p.next))
	n := p.a.AllocN(p.addrs[:want])
	for j, addr := range p.addrs[:n] {
		var f, kind uint64
		if i := p.next + uint64(j); i < p.warm {
			f, kind = i%p.flows, i/p.flows // 0: first, 1: reply, 2: third
		} else {
			// Every flow once in the scattered order, client's packets
			// (3), then every flow again, server's (4), and so on.
			f, kind = p.cur, p.kind
			if p.cur += p.stride; p.cur >= p.flows {
				p.cur -= p.flows
			}
			if p.left--; p.left == 0 {
				p.kind, p.left = p.kind^3^4, p.flows
			}
		}
		l := writeFlowPacket(p.mem[addr:addr+60], f, kind)
		p.descs[j] = rings.Desc{Addr: addr, Len: uint32(l)}
	}
	b.AppendRun(p.descs[:n], p.seq, 0)
	p.seq += uint64(n)
	p.next += uint64(n)
	return n, nil
}

// flowTemplate is one kind of generated packet (TCP or UDP, one of the
// five kinds) with its per-flow fields zero: the flow's addresses, ports
// and sequence numbers are written over a copy, and both checksums are
// the template's constant words' sum (ipSum, l4Sum: unfolded, taken once)
// plus those fields' words. What the port writes per packet is then a
// 60-byte copy and a dozen stores and adds, as cheap as a generator can
// be that still hands every packet over in a fresh frame with correct
// checksums (TestFlowPacketsMatch holds it to a full build of each
// packet).
type flowTemplate struct {
	b            [60]byte
	ipSum, l4Sum uint32
}

var flowTemplates = func() (t [2][5]flowTemplate) {
	for tcp := range 2 {
		for kind := range 5 {
			t[tcp][kind] = makeFlowTemplate(tcp == 1, uint64(kind))
		}
	}
	return t
}()

func makeFlowTemplate(tcp bool, kind uint64) flowTemplate {
	be := binary.BigEndian
	var ft flowTemplate
	d := ft.b[:]
	reply := kind == 1 || kind == 4
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
	be.PutUint32(ip[4:], 0x00014000) // id 1, DF
	ip[8] = 64
	l4 := d[34:60]
	if tcp {
		ip[9] = 6
		// 6 bytes of padding to the 60-byte frame: not part of the segment.
		be.PutUint16(ip[2:], 40)
		flags := [5]byte{0x02, 0x12, 0x10, 0x10, 0x10}[kind] // SYN, SYN/ACK, then ACKs
		l4[12], l4[13] = 5<<4, flags
		be.PutUint16(l4[14:], 65535)
		ft.l4Sum = 6 + 20 + sum16(l4[:20])
	} else {
		ip[9] = 17
		be.PutUint16(ip[2:], 46)
		be.PutUint16(l4[4:], 26)
		ft.l4Sum = 17 + 26 + sum16(l4[:26])
	}
	ft.ipSum = sum16(ip)
	return ft
}

// flowFields returns packet kind of flow f's per-flow fields, the
// addresses as big-endian words (built as words: bytes stored one at a
// time and loaded as a word would stall the store forwarding). Even flows
// are TCP, odd UDP.
func flowFields(f, kind uint64) (tcp bool, src, dst uint32, sp, dp uint16, seq, ack uint32) {
	tcp = f%2 == 0
	client := 10<<24 | uint32(f)&0xffffff
	server := uint32(198)<<24 | 51<<16 | 100<<8 | uint32(1+f%flowServers)
	cport := uint16(1024 + f/flowServers)
	sport := uint16(53)
	if tcp {
		sport = 80
	}
	src, dst, sp, dp = client, server, cport, sport
	if kind == 1 || kind == 4 {
		src, dst, sp, dp = server, binary.BigEndian.Uint32(flowNAT[:]), sport, cport
	}
	if tcp {
		cisn, sisn := uint32(f*2654435761), uint32(f*40503+7)
		switch kind {
		case 0:
			seq = cisn // SYN
		case 1:
			seq, ack = sisn, cisn+1 // SYN/ACK
		case 2, 3:
			seq, ack = cisn+1, sisn+1 // ACK
		case 4:
			seq, ack = sisn+1, cisn+1
		}
	}
	return
}

// writeFlowPacket writes packet kind of flow f into dst (60 bytes) and
// returns its length.
func writeFlowPacket(dst []byte, f, kind uint64) int {
	be := binary.BigEndian
	tcp, s, t, sp, dp, seq, ack := flowFields(f, kind)
	ti := 0
	if tcp {
		ti = 1
	}
	ft := &flowTemplates[ti][kind]
	d := (*[60]byte)(dst[:60])
	*d = ft.b
	be.PutUint32(d[26:], s)
	be.PutUint32(d[30:], t)
	be.PutUint16(d[34:], sp)
	be.PutUint16(d[36:], dp)
	addrs := s>>16 + s&0xffff + t>>16 + t&0xffff
	l4 := ft.l4Sum + addrs + uint32(sp) + uint32(dp)
	if tcp {
		be.PutUint32(d[38:], seq)
		be.PutUint32(d[42:], ack)
		l4 += seq>>16 + seq&0xffff + ack>>16 + ack&0xffff
		be.PutUint16(d[50:], ^fold2(l4))
	} else {
		be.PutUint16(d[40:], ^fold2(l4))
	}
	be.PutUint16(d[24:], ^fold2(ft.ipSum+addrs))
	return 60
}

// sum16 is the ones'-complement sum of b's 16-bit words (even length),
// not yet folded.
func sum16(b []byte) uint32 {
	var s uint32
	for len(b) >= 2 {
		s += uint32(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	return s // a few dozen words: no carry out
}

// fold2 is fold16 in two fixed steps, enough for any sum below 2^31 (the
// generator's are a template's constant and a dozen 16-bit words): the
// loop cost the generator some 14 instructions a packet.
func fold2(s uint32) uint16 {
	s = s&0xffff + s>>16
	s = s&0xffff + s>>16
	return uint16(s)
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
	if in.cpuElapsed > 0 {
		row.CPUNsPerPacket = float64(in.cpuElapsed.Nanoseconds()) / float64(in.steady)
	}
	if res, err := e.Flows(context.Background(), dataplane.FlowQuery{}); err == nil {
		if res.Entries != int(flows) {
			return Row{}, fmt.Errorf("%d flows in the table, want %d", res.Entries, flows)
		}
		row.Flows, row.TableBytesPerFlow = res.Entries, float64(res.Bytes)/float64(res.Capacity)
	}
	return row, nil
}

// threadCPU is the calling thread's CPU time (0 where it cannot be read):
// the rows run on a locked, pinned thread, so it is the row's own time,
// less what other processes on the core took.
func threadCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(rusageThread, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// rusageThread is Linux's RUSAGE_THREAD.
const rusageThread = 1

func statefulBasePipeline() string {
	return benchshape.Default("bench-default-1k", 1000)
}
