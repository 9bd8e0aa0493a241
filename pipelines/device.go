package pipelines

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"

	"github.com/warpflow/warpflow/rings"
)

// The device program: a compiled graph laid out as one flat []uint64 for a
// processor that runs the whole pipeline on each packet by itself (the GPU
// backend's persistent kernel, gpu/kernel.cu). It holds every node of the
// graph (its kind, its edge table, its options, where its counters are)
// and, for each filter stage, the stage's own classifier as a FilterBlob,
// so the device walks the same graph with the same classifier as the
// Runner does.
//
// Layout (word indices into Words):
//
//	header   DeviceHeaderWords words: magic, node count, entry node, the
//	         node table's offset, the counter pairs, how many of them the
//	         device stages per block (the first ones), flags, the samplers,
//	         the program's length in words
//	nodes    DeviceNodeWords words each: kind | edges<<8; the offset of its
//	         edge table (one word per edge: the node it leads to); the
//	         counter pair of its arrivals (packets, bytes); the first of its
//	         edges' pairs; the pair whose packets word counts its calls;
//	         then the kind's parameters from DeviceNodeParam on
//	edges    the edge tables
//	filters  per filter stage: its rules' edges (8 per word, little-endian
//	         bytes), then its FilterBlob
//
// Counters are pairs of words (packets, bytes), numbered from 0: those of
// the nodes first, then the nodes' calls, the edges', the rewrite and count
// stages' small tables (the first Small pairs, which the device may
// accumulate per block before adding them up), then the large tables (a
// filter's per-rule hits, a count stage's VLAN table). Runner.AddDeviceCounts
// adds a vector of them into a runner's own counters, so the device's work
// shows in the same Stats, Counters and live counters as the CPU's.
//
// The device runs a packet from the entry node to a terminal. It may give
// a packet up (the CPU path then runs the whole graph on it) only at an
// entry parse stage, before anything was counted or written: CompileDevice
// refuses a graph with a parse stage anywhere else.

// DeviceProgramMagic is a device program's first word: "WFPROG" and a
// format version.
const DeviceProgramMagic = 0x57465052_4f470001

// Header fields.
const (
	dphMagic = iota
	dphNodes
	dphEntry
	dphNodesOff
	dphCounters
	dphSmall
	dphFlags
	dphSamplers
	dphWords
	dphBadEdge
	// DeviceHeaderWords is the header's length.
	DeviceHeaderWords = 16
)

// Header flags.
const (
	// dpfHeadroom: the program pushes VLAN tags, so the device loads up
	// to dpHeadroomLoad bytes in front of each packet.
	dpfHeadroom = 1 << iota
)

// Node record fields.
const (
	dpnKind = iota // kind | edges<<8
	dpnEdgesOff
	dpnCounter
	dpnEdgeCounters
	dpnCalls
	// DeviceNodeParam is the first parameter word.
	DeviceNodeParam
	// DeviceNodeWords is a node record's length.
	DeviceNodeWords = 16
)

// Device stage kinds, the low byte of a node's first word.
const (
	DeviceParse = 1 + iota
	DeviceFilter
	DeviceRewrite
	DeviceBalance
	DeviceCount
	DeviceSample
	DeviceTX
	DeviceDrop
	DevicePass
)

// Limits of a device program.
const (
	// DeviceMaxNodes bounds a graph's nodes (the device walks at most
	// that many per packet).
	DeviceMaxNodes = 64
	// DeviceMaxSamplers bounds the sample stages (the device writes one
	// list of candidates per sampler and batch).
	DeviceMaxSamplers = 4
	// DeviceMaxPushes bounds the rewrite stages that push a VLAN tag: the
	// device loads 16 bytes of headroom in front of a packet, room for 4.
	DeviceMaxPushes = 4
	// DeviceMaxSmall bounds the counter pairs a device accumulates per
	// block (its shared memory); pairs beyond it are added one by one.
	DeviceMaxSmall = 1536
)

// Count stage key bits (the first count parameter).
const (
	dcProto = 1 << iota
	dcVLAN
	dcClass
)

// ErrNotOnDevice is wrapped by CompileDevice's error for a graph the
// device cannot run whole.
var ErrNotOnDevice = errors.New("cannot run on the device")

// DeviceError names the stage that keeps a graph off the device.
type DeviceError struct {
	Stage, Kind, Reason string
}

func (e *DeviceError) Error() string {
	if e.Stage == "" {
		return fmt.Sprintf("%s: %v", e.Reason, ErrNotOnDevice)
	}
	return fmt.Sprintf("stage %q (%s) %v: %s", e.Stage, e.Kind, ErrNotOnDevice, e.Reason)
}

func (e *DeviceError) Unwrap() error { return ErrNotOnDevice }

// DeviceProgram is a graph compiled for a device (see the layout above).
type DeviceProgram struct {
	Words []uint64
	// Counters is the number of counter pairs: a counter vector is
	// 2*Counters words.
	Counters int
	// Small is how many of the first pairs the device may stage.
	Small int
	// Samplers is the graph's sampler count; sampler k marks packets with
	// bit k, as on the CPU (Graph.Samplers).
	Samplers int
	// Headroom says that the program pushes VLAN tags.
	Headroom bool

	graph *Graph
	nodes []devNode
}

// devNode is where one node's counters are, for AddDeviceCounts.
type devNode struct {
	kind           int
	counter, calls int
	edgeBase       int
	edges          int
	// Stage tables: filter rules (rules+1 pairs); count total, proto,
	// vlan and class bases (-1 when not counted); rewrite's 3 pairs.
	rules                     int
	base                      int
	total, proto, vlan, class int
}

// Graph returns the graph the program was compiled from.
func (p *DeviceProgram) Graph() *Graph { return p.graph }

// CompileDevice lays g out as a device program, or returns a *DeviceError
// (wrapping ErrNotOnDevice) naming the stage that keeps it off the device.
func CompileDevice(g *Graph) (*DeviceProgram, error) {
	if len(g.nodes) > DeviceMaxNodes {
		return nil, &DeviceError{Reason: fmt.Sprintf("%d nodes (stages and implicit drops), more than the %d a device walk takes", len(g.nodes), DeviceMaxNodes)}
	}
	if len(g.samplers) > DeviceMaxSamplers {
		s := g.samplers[DeviceMaxSamplers]
		return nil, &DeviceError{Stage: s.Stage, Kind: sampleKind.Name, Reason: fmt.Sprintf("more than %d sample stages", DeviceMaxSamplers)}
	}
	entry := g.topo[0]
	p := &DeviceProgram{graph: g, Samplers: len(g.samplers), nodes: make([]devNode, len(g.nodes))}
	pushes := 0
	for i := range g.nodes {
		n := &g.nodes[i]
		dn := &p.nodes[i]
		switch t := n.tmpl.(type) {
		case nil:
			if !n.terminal {
				return nil, &DeviceError{Stage: n.name, Kind: n.kind, Reason: "a stage without a template"}
			}
			switch n.verdict {
			case rings.VerdictTX:
				dn.kind = DeviceTX
			case rings.VerdictDrop:
				dn.kind = DeviceDrop
			case rings.VerdictPass:
				dn.kind = DevicePass
			default:
				return nil, &DeviceError{Stage: n.name, Kind: n.kind, Reason: "a terminal without a verdict"}
			}
		case *parseTemplate:
			if int32(i) != entry {
				return nil, &DeviceError{Stage: n.name, Kind: n.kind, Reason: "a parse stage that is not the pipeline's first: the device hands a packet to the CPU only before anything ran on it"}
			}
			dn.kind = DeviceParse
		case *filterTemplate:
			if t.usesCT {
				return nil, &DeviceError{Stage: n.name, Kind: n.kind, Reason: "its rules match ct state, which only the CPU's conntrack stage sets"}
			}
			dn.kind = DeviceFilter
			dn.rules = int(t.cls.n)
		case *rewriteTemplate:
			dn.kind = DeviceRewrite
			if t.cfg.ops&rwPushVLAN != 0 {
				pushes++
				p.Headroom = true
				if pushes > DeviceMaxPushes {
					return nil, &DeviceError{Stage: n.name, Kind: n.kind, Reason: fmt.Sprintf("more than %d stages push VLAN tags", DeviceMaxPushes)}
				}
			}
		case *balanceStage:
			dn.kind = DeviceBalance
		case *countTemplate:
			dn.kind = DeviceCount
		case *sampleStage:
			dn.kind = DeviceSample
			if k := bits.TrailingZeros32(t.bit); k >= DeviceMaxSamplers {
				return nil, &DeviceError{Stage: n.name, Kind: n.kind, Reason: fmt.Sprintf("sampler %d: the device keeps %d", k, DeviceMaxSamplers)}
			}
		default:
			return nil, &DeviceError{Stage: n.name, Kind: n.kind, Reason: "the device has no version of this stage kind"}
		}
		dn.edges = len(n.edges)
	}

	// Counters: the small ones first, in the order the doc says.
	next := 0
	alloc := func(n int) int { at := next; next += n; return at }
	for i := range p.nodes {
		p.nodes[i].counter = alloc(1)
	}
	for i := range p.nodes {
		p.nodes[i].calls = alloc(1)
	}
	for i := range p.nodes {
		p.nodes[i].edgeBase = alloc(p.nodes[i].edges)
	}
	for i := range g.nodes {
		dn := &p.nodes[i]
		dn.total, dn.proto, dn.vlan, dn.class = -1, -1, -1, -1
		switch dn.kind {
		case DeviceRewrite:
			dn.base = alloc(len(rewriteKeys))
		case DeviceCount:
			k := g.nodes[i].tmpl.(*countTemplate).keys
			dn.total = alloc(1)
			if k.class {
				dn.class = alloc(rings.NumClasses)
			}
			if k.proto {
				dn.proto = alloc(countProtoNone + 1)
			}
		}
	}
	p.Small = min(next, DeviceMaxSmall)
	for i := range g.nodes {
		dn := &p.nodes[i]
		switch dn.kind {
		case DeviceFilter:
			dn.base = alloc(dn.rules + 1)
		case DeviceCount:
			if g.nodes[i].tmpl.(*countTemplate).keys.vlan {
				dn.vlan = alloc(countVLANNone + 1)
			}
		}
	}
	p.Counters = next

	// Words: header, node table, edge tables, filter tables and blobs.
	w := make([]uint64, DeviceHeaderWords+DeviceNodeWords*len(g.nodes))
	w[dphMagic] = DeviceProgramMagic
	w[dphNodes] = uint64(len(g.nodes))
	w[dphEntry] = uint64(entry)
	w[dphNodesOff] = DeviceHeaderWords
	w[dphCounters] = uint64(p.Counters)
	w[dphSmall] = uint64(p.Small)
	w[dphSamplers] = uint64(p.Samplers)
	w[dphBadEdge] = uint64(g.badEdge)
	if p.Headroom {
		w[dphFlags] |= dpfHeadroom
	}
	for i := range g.nodes {
		n := &g.nodes[i]
		dn := &p.nodes[i]
		r := DeviceHeaderWords + DeviceNodeWords*i
		w[r+dpnKind] = uint64(dn.kind) | uint64(dn.edges)<<8
		w[r+dpnEdgesOff] = uint64(len(w))
		for _, e := range n.edges {
			w = append(w, uint64(e))
		}
		w[r+dpnCounter] = uint64(dn.counter)
		w[r+dpnEdgeCounters] = uint64(dn.edgeBase)
		w[r+dpnCalls] = uint64(dn.calls)
		// The parameters, copied into the record after the appends below
		// (which may move w).
		var par [DeviceNodeWords - DeviceNodeParam]uint64
		switch dn.kind {
		case DeviceTX, DeviceDrop, DevicePass:
			par[0], par[1] = uint64(n.verdict), uint64(n.target)
		case DeviceParse:
			if n.tmpl.(*parseTemplate).tunnels {
				par[0] = 1
			}
		case DeviceFilter:
			t := n.tmpl.(*filterTemplate)
			edgesOff := len(w)
			for k := 0; k < len(t.ruleEdge); k += 8 {
				var b [8]byte
				copy(b[:], t.ruleEdge[k:])
				w = append(w, binary.LittleEndian.Uint64(b[:]))
			}
			blob := t.cls.serialise()
			// The blob's own offsets are relative to its start; the
			// device adds the blob's offset.
			blobOff := len(w)
			w = append(w, blob.Words...)
			par[0], par[1], par[2], par[3] = uint64(blobOff), uint64(dn.rules), uint64(edgesOff), uint64(dn.base)
		case DeviceRewrite:
			c := &n.tmpl.(*rewriteTemplate).cfg
			par[0] = uint64(c.ops) | uint64(c.pushTPID)<<16 | uint64(c.pushTCI)<<32 | uint64(c.ttlEdge)<<48 | uint64(c.headroomEdge)<<56
			par[1] = mac48(c.srcMAC)
			par[2] = mac48(c.dstMAC)
			par[3], par[4] = natWord(c.snat), uint64(c.snat.addrSum)
			par[5], par[6] = natWord(c.dnat), uint64(c.dnat.addrSum)
			par[7] = uint64(dn.base)
		case DeviceBalance:
			par[0] = n.tmpl.(*balanceStage).n
		case DeviceCount:
			k := n.tmpl.(*countTemplate).keys
			if k.proto {
				par[0] |= dcProto
			}
			if k.vlan {
				par[0] |= dcVLAN
			}
			if k.class {
				par[0] |= dcClass
			}
			par[1], par[2], par[3], par[4] = uint64(dn.total), sentinel(dn.proto), sentinel(dn.vlan), sentinel(dn.class)
		case DeviceSample:
			par[0] = uint64(bits.TrailingZeros32(n.tmpl.(*sampleStage).bit))
		}
		copy(w[r+DeviceNodeParam:r+DeviceNodeWords], par[:])
	}
	w[dphWords] = uint64(len(w))
	p.Words = w
	return p, nil
}

func sentinel(i int) uint64 {
	if i < 0 {
		return ^uint64(0)
	}
	return uint64(i)
}

// mac48 is a MAC address as a 48-bit big-endian number.
func mac48(m [6]byte) uint64 {
	var b [8]byte
	copy(b[2:], m[:])
	return binary.BigEndian.Uint64(b[:])
}

// natWord packs a NAT rule: the address (big-endian) | port<<32 |
// hasPort<<48.
func natWord(r natRule) uint64 {
	w := uint64(binary.BigEndian.Uint32(r.addr[:])) | uint64(r.port)<<32
	if r.hasPort {
		w |= 1 << 48
	}
	return w
}

// AddDeviceCounts adds counter vector c (2*p.Counters words: packets and
// bytes of each pair, as the device counted them since the last call) into
// r's own counters, as if r had processed those packets: per node, per
// edge, per filter rule, per count key and the rewrite exceptions; the
// live tables are marked, so the next Publish shows them. The nanoseconds
// per node are not the device's to give. r must be a runner of p's graph,
// and only its own goroutine may call this, between batches.
func (r *Runner) AddDeviceCounts(p *DeviceProgram, c []uint64) error {
	if r.g != p.graph {
		return errors.New("device counts: the runner is not of the program's graph")
	}
	if len(c) != 2*p.Counters {
		return fmt.Errorf("device counts: %d words for %d counter pairs", len(c), p.Counters)
	}
	pair := func(i int) (uint64, uint64) { return c[2*i], c[2*i+1] }
	for i := range p.nodes {
		dn := &p.nodes[i]
		rn := &r.nodes[i]
		pk, by := pair(dn.counter)
		rn.packets += pk
		rn.bytes += by
		calls, _ := pair(dn.calls)
		rn.calls += calls
		for e := 0; e < dn.edges; e++ {
			pk, by := pair(dn.edgeBase + e)
			rn.edgePackets[e] += pk
			rn.edgeBytes[e] += by
		}
		switch s := rn.stage.(type) {
		case *filterStage:
			for k := 0; k <= dn.rules; k++ {
				if pk, by := pair(dn.base + k); pk != 0 {
					s.pkts[k] += pk
					s.bytes[k] += by
					s.live.mark(k)
				}
			}
		case *countStage:
			add := func(at, base, n int) {
				for k := 0; k < n; k++ {
					if pk, by := pair(base + k); pk != 0 {
						s.all[at+k].packets += pk
						s.all[at+k].bytes += by
						s.live.mark(at + k)
					}
				}
			}
			add(0, dn.total, 1)
			if dn.proto >= 0 {
				add(s.protoAt, dn.proto, countProtoNone+1)
			}
			if dn.vlan >= 0 {
				add(s.vlanAt, dn.vlan, countVLANNone+1)
			}
			if dn.class >= 0 {
				add(s.classAt, dn.class, rings.NumClasses)
			}
		case *rewriteStage:
			for k, rc := range [...]*rwCounter{&s.skipped, &s.truncated, &s.runt} {
				pk, by := pair(dn.base + k)
				rc.packets += pk
				rc.bytes += by
			}
		}
	}
	return nil
}

// Tapped reports whether a tap is set on r (SetTap): a backend that runs
// the graph elsewhere sends every packet through r while it is, so the
// tap sees them all.
func (r *Runner) Tapped() bool { return r.tap.Load() != nil }

// DeviceConst is one constant a device's code shares with this package:
// gpu's header generator writes each as a #define of its name.
type DeviceConst struct {
	Name  string
	Value uint64
}

// DeviceConstants lists the constants of the device program, the filter
// blob and key, the stage options and rings' metadata that device code
// needs, from their one definition here and in rings.
func DeviceConstants() []DeviceConst {
	c := []DeviceConst{
		{"PROG_MAGIC", DeviceProgramMagic},
		{"PH_MAGIC", dphMagic}, {"PH_NODES", dphNodes}, {"PH_ENTRY", dphEntry}, {"PH_NODES_OFF", dphNodesOff},
		{"PH_COUNTERS", dphCounters}, {"PH_SMALL", dphSmall}, {"PH_FLAGS", dphFlags}, {"PH_SAMPLERS", dphSamplers},
		{"PH_WORDS", dphWords}, {"PH_BAD_EDGE", dphBadEdge}, {"PH_HEADER_WORDS", DeviceHeaderWords},
		{"PF_HEADROOM", dpfHeadroom},
		{"PN_KIND", dpnKind}, {"PN_EDGES_OFF", dpnEdgesOff}, {"PN_COUNTER", dpnCounter},
		{"PN_EDGE_COUNTERS", dpnEdgeCounters}, {"PN_CALLS", dpnCalls}, {"PN_PARAM", DeviceNodeParam},
		{"PN_WORDS", DeviceNodeWords},
		{"K_PARSE", DeviceParse}, {"K_FILTER", DeviceFilter}, {"K_REWRITE", DeviceRewrite}, {"K_BALANCE", DeviceBalance},
		{"K_COUNT", DeviceCount}, {"K_SAMPLE", DeviceSample}, {"K_TX", DeviceTX}, {"K_DROP", DeviceDrop}, {"K_PASS", DevicePass},
		{"MAX_NODES", DeviceMaxNodes}, {"MAX_SAMPLERS", DeviceMaxSamplers}, {"MAX_PUSHES", DeviceMaxPushes},
		{"MAX_SMALL", DeviceMaxSmall},
		{"CNT_PROTO", dcProto}, {"CNT_VLAN", dcVLAN}, {"CNT_CLASS", dcClass},
		{"COUNT_PROTO_NONE", countProtoNone}, {"COUNT_VLAN_NONE", countVLANNone},
		{"RW_POP_VLAN", uint64(rwPopVLAN)}, {"RW_PUSH_VLAN", uint64(rwPushVLAN)}, {"RW_SRC_MAC", uint64(rwSrcMAC)},
		{"RW_DST_MAC", uint64(rwDstMAC)}, {"RW_SWAP_MACS", uint64(rwSwapMACs)}, {"RW_TTL", uint64(rwTTL)},
		{"RW_SNAT", uint64(rwSNAT)}, {"RW_DNAT", uint64(rwDNAT)},
		{"BALANCE_SEED", balanceSeed},
		{"BLOB_MAGIC", FilterBlobMagic},
		{"BH_MAGIC", bhMagic}, {"BH_RULES", bhRules}, {"BH_TREES", bhTrees}, {"BH_TREES_OFF", bhTreesOff},
		{"BH_NODES_OFF", bhNodesOff}, {"BH_LEAVES_OFF", bhLeavesOff}, {"BH_CHECKS_OFF", bhChecksOff},
		{"BH_POOL_OFF", bhPoolOff}, {"BH_EXACT_OFF", bhExactOff}, {"BH_GATES_OFF", bhGatesOff},
		{"BH_PRE_OFF", bhPreOff}, {"BH_PRE_N", bhPreN}, {"BH_BITS_OFF", bhBitsOff}, {"BH_XPOOL_OFF", bhXpoolOff},
		{"BH_WORDS", bhWords},
		{"D_L3", dL3}, {"D_SRC_HI", dSrcHi}, {"D_SRC_LO", dSrcLo}, {"D_DST_HI", dDstHi}, {"D_DST_LO", dDstLo},
		{"D_SPORT", dSport}, {"D_DPORT", dDport}, {"D_VLAN", dVLAN}, {"D_CLASS", dClass}, {"D_TCP", dTCP},
		{"D_FRAG", dFrag}, {"N_DIMS", nDims}, {"LEAF_DIM", leafDim},
		{"FAM_NONE", famNone}, {"FAM_V4", famV4}, {"FAM_V6", famV6}, {"FAM_ARP", famARP},
		{"NO_PROTO", noProto}, {"NO_PORT", noPort}, {"NO_VLAN", noVLAN}, {"NO_TCP", noTCP},
		{"NUM_CLASSES", uint64(rings.NumClasses)},
		{"CLASS_UNPARSED", uint64(rings.ClassUnparsed)}, {"CLASS_OK", uint64(rings.ClassOK)},
		{"FLAG_IPV4", uint64(rings.FlagIPv4)}, {"FLAG_IPV6", uint64(rings.FlagIPv6)}, {"FLAG_L4", uint64(rings.FlagL4)},
		{"FLAG_FRAGMENT", uint64(rings.FlagFragment)},
		{"VERDICT_TX", uint64(rings.VerdictTX)}, {"VERDICT_DROP", uint64(rings.VerdictDrop)}, {"VERDICT_PASS", uint64(rings.VerdictPass)},
		{"REWRITE_COUNTERS", uint64(len(rewriteKeys))},
	}
	return c
}
