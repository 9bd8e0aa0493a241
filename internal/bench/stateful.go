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
	// RowStatefulNIC is the stateful row with its packets written by a
	// thread on another core, as a NIC's DMA would (nicgen.go): a
	// reference row beside RowStateful, whose own core writes them.
	RowStatefulNIC = "warpflow stateful, packets written by another core (reference) -> null"
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

var flowMACs = [2]net.HardwareAddr{{0x02, 0, 0, 0, 0, 0xa}, {0x02, 0, 0, 0, 0, 0xb}}

// flowServers is the number of servers (198.51.100.1..200); a constant,
// so that the generator's divisions by it are multiplications.
const flowServers = 200

// flowPort generates the stateful rows' packets.
type flowPort struct {
	a     *rings.Arena
	mem   []byte
	flows uint64
	// warm is the setup packets (three per flow), steady the measured
	// ones after them; next is the next packet number handed to the
	// engine, written the next one written (the same in-core; with a NIC
	// thread, its own copy of the port writes and this one receives).
	warm, steady, next, written uint64
	// nic is the NIC thread's rings where the packets are written on a
	// core of their own; nil where Receive writes them.
	nic    *nicGen
	seq    uint64
	stride uint64 // coprime with flows: scatters the flow order
	// cur is the next packet's flow and kind its packet kind; left
	// counts down the packets to the next change of kind. The set-up
	// phase takes the flows in order (i%flows for packet i, kind
	// i/flows), the steady phase in the scattered order
	// ((j%flows)*stride%flows for steady packet j, kind 3 then 4, and so
	// on); both keep cur by addition.
	cur, kind, left uint64
	start           time.Time
	elapsed         time.Duration
	ms0, ms1        runtime.MemStats
	started         bool // the steady phase's clock and counts started
	// descs is Receive's scratch: a batch's descriptors.
	descs [rings.MaxBatch]rings.Desc
	// cpu0 and cpuElapsed: the thread's CPU time, beside the wall time
	// (on a shared machine the thread is not always on its core).
	cpu0, cpuElapsed time.Duration
}

func newFlowPort(a *rings.Arena, flows, steady uint64) *flowPort {
	p := &flowPort{a: a, mem: a.Mem(), flows: flows, warm: 3 * flows, steady: steady, stride: 2654435761 % flows, left: flows}
	for i := range p.descs {
		p.descs[i].Len = flowPacketLen // Receive writes only the addresses
	}
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

// Receive hands the engine up to a batch of packets: written here, on
// the row's own core (in-core), or taken off the rx ring that the NIC
// thread fills (nicgen.go).
func (p *flowPort) Receive(b *rings.Batch) (int, error) {
	total := p.warm + p.steady
	if p.next >= total {
		if p.elapsed == 0 {
			p.elapsed = time.Since(p.start)
			p.cpuElapsed = threadCPU() - p.cpu0
			runtime.ReadMemStats(&p.ms1)
			if p.nic != nil {
				p.nic.finish()
			}
		}
		return 0, io.EOF
	}
	if p.next == p.warm && !p.started {
		// Once (a receive that got no frame comes here again).
		p.started = true
		// The set-up's garbage is collected here, before the clock
		// starts, not in the timed phase: a cycle the set-up started
		// would otherwise finish there, and the runtime's periodic
		// collection (due two minutes after the last, which a whole
		// warpctl bench outlasts) could fall there too. Either stops
		// the world, and starting it again with every P's thread
		// locked to a row (the NIC thread's reference row) makes the
		// runtime a new thread: a few mallocs that are no packet's (a
		// median run of that row counted 7 on the AMD dev VM; a memory
		// profile of the row shows runtime.newm after a stop of the
		// world, which one was not traced: this removes both candidates
		// from the timed phase). After a collection now, the steady phase,
		// which allocates nothing, triggers none, and this one has
		// made any thread the next stop of the world needs.
		runtime.GC()
		runtime.ReadMemStats(&p.ms0)
		p.start = time.Now()
		p.cpu0 = threadCPU()
	}
	b.SetTime(1_000_000) // one instant: nothing expires during the run
	end := total
	if p.next < p.warm {
		end = p.warm // the steady phase starts on a batch of its own
	}
	want := int(min(uint64(cap(b.Descs)-len(b.Descs)), end-p.next))
	var n int
	if p.nic != nil {
		var err error
		if n, err = p.nic.receive(p.descs[:want], p.next >= p.warm); err != nil {
			return 0, err
		}
	} else {
		// The frames first, then the packets, then one run into the
		// batch (one bulk clear of the metadata, as a NIC port hands over
		// a run of descriptors).
		n = p.a.AllocDescs(p.descs[:want])
		p.write(p.descs[:n])
	}
	b.AppendRun(p.descs[:n], p.seq, 0)
	p.seq += uint64(n)
	p.next += uint64(n)
	return n, nil
}

// write writes the next len(descs) packets into the frames descs name
// (their Addr; Len is flowPacketLen throughout) and advances the packet
// kind and flow. The caller keeps a call within one phase (set-up or
// steady): the set-up phase goes in flow order, the steady one scattered.
func (p *flowPort) write(descs []rings.Desc) {
	stride := p.stride
	if p.written < p.warm {
		stride = 1
	}
	p.written += uint64(len(descs))
	// The packets in runs of one kind (it changes every p.flows packets):
	// every flow's SYN in flow order (stride 1), then every SYN/ACK, then
	// every third packet; then, in the scattered order, every flow's
	// client packet (3), then every server packet (4), and so on.
	for len(descs) > 0 {
		k := int(min(uint64(len(descs)), p.left))
		p.cur = writeFlows(p.mem, descs[:k], p.cur, stride, p.flows, p.kind)
		descs = descs[k:]
		if p.left -= uint64(k); p.left == 0 {
			p.left = p.flows
			if p.kind < 3 {
				p.kind++ // and cur is back at 0, where the steady phase starts
			} else {
				p.kind ^= 3 ^ 4
			}
		}
	}
}

// flowPacketLen is the length of every generated packet: 64 bytes on the
// wire with the FCS. Receive's descriptors keep it from newFlowPort on.
const flowPacketLen = 60

// flowTemplate is one kind of generated packet (TCP or UDP, one of the
// five kinds) with its per-flow fields zero: the flow's addresses, ports
// and sequence numbers are written over a copy, and both checksums are
// the template's constant words' sum (ipSum, l4Sum: unfolded, taken once)
// plus those fields' words. What the port writes per packet is then a
// 60-byte copy and a few stores and adds, as cheap as a generator can
// be that still hands every packet over in a fresh frame with correct
// checksums (TestFlowPacketsMatch holds it to a full build of each
// packet).
type flowTemplate struct {
	b            [flowPacketLen]byte
	ipSum, l4Sum uint32
	tcp          bool
	// reply is set for the server's packets (kinds 1 and 4): from the
	// server to the NAT address, where the client's go to the server.
	reply bool
	sport uint32 // the server's port
	// synSeq is 1 for the SYN and the SYN/ACK, whose sequence number is
	// the ISN, one below what their senders send after them; ackMask is
	// 0 for the SYN, which acks nothing, all ones for the others.
	synSeq, ackMask uint32
}

// flowTemplates is indexed by packet kind and flow%2 (TCP, UDP).
var flowTemplates = func() (t [5][2]flowTemplate) {
	for kind := range 5 {
		t[kind][0] = makeFlowTemplate(true, uint64(kind))
		t[kind][1] = makeFlowTemplate(false, uint64(kind))
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
		ft.sport = 80
	} else {
		ip[9] = 17
		be.PutUint16(ip[2:], 46)
		be.PutUint16(l4[4:], 26)
		ft.l4Sum = 17 + 26 + sum16(l4[:26])
		ft.sport = 53
	}
	ft.ipSum = sum16(ip)
	ft.tcp, ft.reply = tcp, reply
	if kind < 2 {
		ft.synSeq = 1
	}
	if kind != 0 {
		ft.ackMask = ^uint32(0)
	}
	return ft
}

// flowEnds returns flow f's fields: the client's and the server's
// address as big-endian words (built as words: bytes stored one at a time
// and loaded as a word would stall the store forwarding), the client's
// port, and the sequence numbers each end sends after its SYN (its ISN +
// 1; only TCP's packets carry them). Even flows are TCP, odd UDP; the
// server's port is its template's.
func flowEnds(f uint64) (client, server, cport, cseq, sseq uint32) {
	// f in 32 bits (exact: a port holds f/200, so f < 12.9M): a 32-bit
	// division by a constant is a multiply in any register, a 64-bit one
	// ties up the two a MUL needs.
	f32 := uint32(f)
	client = 10<<24 | f32&0xffffff
	server = 198<<24 | 51<<16 | 100<<8 | (1 + f32%flowServers)
	cport = 1024 + f32/flowServers
	cseq, sseq = uint32(f*2654435761)+1, uint32(f*40503+7)+1
	return
}

// flowNAT is the SNAT address (192.0.2.1, the pipeline's) as a word: the
// destination of every reply, as the NAT keeps each client's port.
const flowNAT = 192<<24 | 0<<16 | 2<<8 | 1

// writeFlows writes packet kind of flows f, f+stride, f+2*stride, ...
// (modulo flows) into the frames descs name and returns the flow after
// the last. Its loops make no call (each would cost the loop its
// registers, saved and restored around it), and the server's packets
// have a loop of their own: choosing between the two directions' fields
// in one loop cost some 20 instructions a packet more.
func writeFlows(mem []byte, descs []rings.Desc, f, stride, flows, kind uint64) uint64 {
	fts := &flowTemplates[kind] // [f%2]: TCP, UDP
	if fts[0].reply {
		// The server's packets: to the NAT address and the client's
		// port, which the NAT keeps.
		for i := range descs {
			addr := descs[i].Addr
			_, server, cport, cseq, sseq := flowEnds(f)
			ft := &fts[f%2]
			if f += stride; f >= flows {
				f -= flows
			}
			d := (*[flowPacketLen]byte)(mem[addr : addr+flowPacketLen])
			sum := putFlowIP(d, ft, server, flowNAT, ft.sport<<16|cport)
			putFlowL4(d, ft, sum, sseq-ft.synSeq, cseq)
		}
		return f
	}
	for i := range descs {
		addr := descs[i].Addr
		client, server, cport, cseq, sseq := flowEnds(f)
		ft := &fts[f%2]
		if f += stride; f >= flows {
			f -= flows
		}
		d := (*[flowPacketLen]byte)(mem[addr : addr+flowPacketLen])
		sum := putFlowIP(d, ft, client, server, cport<<16|ft.sport)
		putFlowL4(d, ft, sum, cseq-ft.synSeq, sseq&ft.ackMask)
	}
	return f
}

// putFlowIP writes template ft into d with the addresses, the ports
// (one word, the source port high) and the IP header's checksum, and
// returns the L4 checksum's sum so far: its template's, the addresses'
// and the ports'.
//
// A 32-bit word adds to a ones' complement sum as its two 16-bit halves
// do (2^16 = 1 modulo 0xffff), so each checksum is its template's sum
// plus the fields as plain numbers, folded once. putFlowIP and putFlowL4
// are small enough to inline, where one function would be a call.
func putFlowIP(d *[flowPacketLen]byte, ft *flowTemplate, src, dst, ports uint32) uint64 {
	be := binary.BigEndian
	*d = ft.b
	be.PutUint64(d[26:], uint64(src)<<32|uint64(dst))
	be.PutUint32(d[34:], ports)
	addrs := uint64(src) + uint64(dst)
	be.PutUint16(d[24:], ^fold64(uint64(ft.ipSum)+addrs))
	return uint64(ft.l4Sum) + addrs + uint64(ports)
}

// putFlowL4 finishes putFlowIP's packet: for TCP the sequence and ack
// numbers, and the TCP or UDP checksum (sum is putFlowIP's).
func putFlowL4(d *[flowPacketLen]byte, ft *flowTemplate, sum uint64, seq, ack uint32) {
	be := binary.BigEndian
	if !ft.tcp {
		be.PutUint16(d[34+6:], ^fold64(sum))
		return
	}
	be.PutUint32(d[34+4:], seq)
	be.PutUint32(d[34+8:], ack)
	be.PutUint16(d[34+16:], ^fold64(sum+uint64(seq)+uint64(ack)))
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

// fold64 is the 16-bit ones' complement sum of words whose plain sum is
// s (not 0): congruent to s modulo 0xffff and never 0, fold16's result
// for any sum, in one division by a constant.
func fold64(s uint64) uint16 {
	return uint16((s-1)%0xffff + 1)
}

// statefulRow runs config over flows flows, steady packets measured,
// inline on the calling (pinned) thread. It reports the steady phase's
// rate and allocations and, for a pipeline with a conntrack stage, the
// table's memory per flow.
func statefulRow(config string, flows, steady uint64, genCPU int) (Row, error) {
	g, err := pipelines.Load("bench", []byte(config))
	if err != nil {
		return Row{}, fmt.Errorf("bench pipeline: %w", err)
	}
	a, err := rings.NewArena(rings.ArenaOptions{Frames: 1024, FrameSize: 2048, Headroom: 256})
	if err != nil {
		return Row{}, err
	}
	in := newFlowPort(a, flows, steady)
	gen := "in-core"
	if genCPU >= 0 {
		nic, err := startNICGen(a, in, genCPU)
		if err != nil {
			return Row{}, err
		}
		defer nic.finish()
		in.nic, gen = nic, fmt.Sprintf("cpu %d", genCPU)
	}
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
		Generator:   gen,
	}
	if in.nic != nil {
		row.GeneratorWaits = in.nic.waitShare()
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
