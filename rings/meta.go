package rings

// Class says what the parse stage made of a packet. Malformed packets get a
// named class instead of an error value, so the hot path never allocates or
// returns errors per packet; a filter or the accounting can then drop them by
// class with a named reason.
type Class uint8

const (
	ClassUnparsed     Class = iota // no parse stage has seen the packet
	ClassOK                        // every header we know was well formed
	ClassTruncated                 // a header ran past the end of the frame
	ClassBadHeaderLen              // a header length field is impossible (IHL < 5, TCP offset < 5, ...)
	ClassBadVersion                // IP version nibble does not match the ethertype
	ClassBadTotalLen               // IP total/payload length disagrees with the frame
	ClassTooDeep                   // too many VLAN tags, extension headers or tunnel levels
	ClassUnknownL3                 // an ethertype we do not parse (not an error: counted apart)
	numClasses
)

var classNames = [numClasses]string{
	ClassUnparsed:     "unparsed",
	ClassOK:           "ok",
	ClassTruncated:    "truncated",
	ClassBadHeaderLen: "bad_header_len",
	ClassBadVersion:   "bad_version",
	ClassBadTotalLen:  "bad_total_len",
	ClassTooDeep:      "too_deep",
	ClassUnknownL3:    "unknown_l3",
}

// NumClasses is the number of defined classes, for dense per-class counters.
const NumClasses = int(numClasses)

// String returns the class's config and counter name.
func (c Class) String() string {
	if int(c) < len(classNames) {
		return classNames[c]
	}
	return "invalid"
}

// ClassByName returns the class with the given name.
func ClassByName(name string) (Class, bool) {
	for i, n := range classNames {
		if n == name {
			return Class(i), true
		}
	}
	return 0, false
}

// Flags are facts about a packet that the parse stage records.
type Flags uint16

const (
	FlagIPv4      Flags = 1 << iota // outer L3 is IPv4 (L3Off valid)
	FlagIPv6                        // outer L3 is IPv6 (L3Off valid)
	FlagL4                          // L4Off valid and ports (if any) filled in
	FlagFragment                    // outer IP packet is a fragment (any offset or MF)
	FlagFirstFrag                   // fragment with offset 0 (L4 header may be present)
	FlagIPOptions                   // IPv4 options present or IPv6 extension headers walked
	FlagTunnel                      // a tunnel (VXLAN, GENEVE, GRE) was recognised; Inner* valid
	FlagInnerL4                     // InnerL4Off valid
	FlagARP                         // L3 is ARP
	FlagCut                         // the capture kept fewer bytes than the packet had (set by the receiving port, kept by parse)
	// FlagVirtualL4: a later fragment (FlagFragment without FlagFirstFrag)
	// whose SrcPort/DstPort a reassemble stage filled in from its
	// datagram's first fragment; L4Off stays invalid (no L4 header here).
	FlagVirtualL4
)

// Tunnel names the encapsulation recognised by the parse stage.
type Tunnel uint8

const (
	TunnelNone Tunnel = iota
	TunnelVXLAN
	TunnelGENEVE
	TunnelGRE
	TunnelIPIP // IPv4 or IPv6 directly in IP (protocols 4 and 41)
)

// Verdict is what the pipeline decided for a packet. Terminal nodes of the
// graph write it; the engine acts on it after the batch.
type Verdict uint8

const (
	VerdictNone Verdict = iota // no terminal reached yet
	VerdictTX                  // transmit on output port Meta.Target
	VerdictDrop                // drop with reason Meta.Target (index in the graph's reason table)
	VerdictPass                // hand back to the kernel (or the port's pass path)
)

// Meta is the per-packet metadata that travels beside a Desc in a Batch.
// Offsets are from the first byte of the packet (Desc.Addr). All of it is
// plain data, rewritten in place for every batch: stages must not keep
// pointers into it.
type Meta struct {
	Seq    uint64 // receive sequence number: dense, assigned by the receiving port, deterministic
	InPort uint16 // index of the port the packet came from

	Class  Class
	Tunnel Tunnel
	Flags  Flags

	EtherType uint16    // ethertype of the L3 header after any VLAN tags
	VLANs     [2]uint16 // VLAN IDs, outermost first (VLANs[0] is the outer tag of QinQ)
	NumVLANs  uint8
	IPProto   uint8 // L4 protocol number of the outer IP packet (after extension headers)
	TTL       uint8 // IPv4 TTL or IPv6 hop limit
	TCPFlags  uint8

	L3Off uint16 // offset of the IP (or ARP) header
	L4Off uint16 // offset of the L4 header, when FlagL4
	// Inner headers of a recognised tunnel (FlagTunnel): offsets of the inner
	// Ethernet (VXLAN, GENEVE with Ethernet payload, GRE TEB), IP and L4 headers;
	// zero when absent.
	InnerL2Off uint16
	InnerL3Off uint16
	InnerL4Off uint16

	// Outer 5-tuple. IPv4 addresses are stored in the first four bytes of
	// SrcIP/DstIP and the rest is zero; FlagIPv4/FlagIPv6 tell which.
	SrcIP   [16]byte
	DstIP   [16]byte
	SrcPort uint16 // TCP/UDP/SCTP port; ICMP type<<8|code for ICMP
	DstPort uint16 // TCP/UDP/SCTP port; ICMP echo identifier for echo

	Hash uint32 // symmetric 5-tuple hash, written by balance (0 until then)

	Verdict Verdict
	// CT is the connection-tracking state a conntrack stage gave the
	// packet: a CTState in the low bits, CTReply set for a packet of the
	// reply direction. Zero (CTUntracked) until a conntrack stage runs.
	// It sits in what was padding after Verdict: Meta's size is unchanged.
	CT     uint8
	Target uint16 // output port index (VerdictTX) or drop reason index (VerdictDrop)

	SampleMask uint32 // bit i set: sample stage i saw the packet and it is a sampling candidate

	// Time is when the packet was received, in milliseconds on a clock
	// that wraps every 2^32 ms (49.7 days): compare two times by their
	// signed difference, int32(a-b). A replay port writes the capture's
	// timestamp (Unix ms, truncated), so a replay times out flows the
	// same way every run; the engine writes one clock read per receive
	// call for ports that stamp nothing (Batch.SetTime). Stateful stages
	// (conntrack, nat, reassemble) read it; nothing else does. It sits in
	// what was tail padding: Meta's size is unchanged.
	Time uint32
}

// Connection-tracking states (Meta.CT), the classes Linux's ct state
// names: what a filter's ct: match tests.
const (
	CTUntracked   uint8 = iota // no conntrack stage saw the packet
	CTNew                      // first packets of a flow, before any reply
	CTEstablished              // a flow that has seen traffic both ways (or a reply)
	CTRelated                  // an ICMP error about a tracked flow
	CTInvalid                  // the tracker could not place it (see the conntrack stage's reasons)

	CTStateMask uint8 = 0x07
	// CTReply marks a packet of the flow's reply direction (ct_dir reply).
	CTReply uint8 = 0x08
)

// Reset clears everything the pipeline writes, keeping Seq, InPort and
// Time (what the receiving port wrote).
func (m *Meta) Reset() {
	seq, in, t := m.Seq, m.InPort, m.Time
	*m = Meta{Seq: seq, InPort: in, Time: t}
}
