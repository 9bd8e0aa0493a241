package xdp

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
	"github.com/warpflow/warpflow/pipelines"
	"github.com/warpflow/warpflow/rings"
)

const xdpDrop = 1

// offloadTestYAML is a pipeline whose first filter has a long kernel
// prefix over every field the kernel reads, each rule with its own verdict
// label so that a worker's verdict names the rule that gave it. Rule 0 is
// a class rule (it never fires in the kernel); the tx rule stops the
// prefix.
const offloadTestYAML = `name: offload-oracle
settings: {batch_size: 1, workers: 0}
stages:
  - {name: parse, type: parse}
  - name: acl
    type: filter
    default: out
    rules:
      - {class: malformed, action: "drop:malformed"}
      - {proto: udp, dst_port: 53, action: tokernel}
      - {proto: tcp, tcp_flags: "syn,!ack", action: "drop:syn"}
      - {vlan: 1-4095, proto: ipv4, action: "drop:vlan"}
      - {fragment: true, action: "drop:frag"}
      - {proto: icmp, action: "drop:icmp"}
      - {proto: sctp, src_port: 1-1024, action: "drop:sctp"}
      - {dst: [10.0.0.0/8, 2001:db8::/32, 192.168.0.0/16], proto: tcp, dst_port: 80-8080, action: "drop:web"}
      - {proto: icmpv6, action: "drop:icmp6"}
      - {src: [192.168.0.0/16, 172.16.0.0/12, "fe80::/10"], action: "drop:lan"}
      - {proto: gre, action: "drop:gre"}
      - {proto: udp, src_port: 1024-65535, dst_port: 1024-65535, action: "drop:highudp"}
      - {proto: [ipv6], tcp_flags: "ack", action: "drop:ack6"}
      - {proto: tcp, action: out}
      - {proto: udp, action: "drop:udp"}
  - {name: tokernel, type: pass}
  - {name: out, type: tx, port: out0}
`

// offloadCaptures lists the captures the oracle test replays: the
// repository's own and its copy of the shared corpus (testdata/corpus).
func offloadCaptures(t *testing.T) []string {
	var files []string
	for _, g := range []string{"../testdata/captures/*.pcap", "../testdata/corpus/*.pcap"} {
		m, _ := filepath.Glob(g)
		files = append(files, m...)
	}
	if len(files) == 0 {
		t.Fatal("no captures found under ../testdata")
	}
	return files
}

func readEthernetPackets(t *testing.T, path string) [][]byte {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		return nil // the bad/ captures: not readable on purpose
	}
	if r.LinkType() != layers.LinkTypeEthernet {
		return nil
	}
	var out [][]byte
	for {
		data, _, err := r.ReadPacketData()
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || err != nil {
			break
		}
		out = append(out, append([]byte(nil), data...))
	}
	return out
}

// kernelShape reports whether the kernel's parser should decide a packet
// the workers parsed into m (p its bytes): class OK, IP right after
// Ethernet and at most 2 VLAN tags (not below PPPoE or MPLS, which the
// kernel leaves to the workers), IPv4 without AH, or IPv6 without
// extension headers.
func kernelShape(p []byte, m *rings.Meta) bool {
	if m.Class != rings.ClassOK || int(m.L3Off) != 14+4*int(m.NumVLANs) {
		return false
	}
	switch {
	case m.Flags&rings.FlagIPv4 != 0:
		return p[int(m.L3Off)+9] != 51
	case m.Flags&rings.FlagIPv6 != 0:
		return m.Flags&rings.FlagIPOptions == 0
	}
	return false
}

// TestOffloadAgreesWithReplay is the split's oracle test: the XDP program,
// with the pipeline's kernel prefix loaded, runs (BPF_PROG_TEST_RUN) on
// every Ethernet packet of the test captures and on truncated and
// corrupted copies of each, and its verdict is held against the workers'
// (the compiled graph's runner, as replay runs it) packet by packet:
//
//   - a kernel drop is the workers' drop by a kernel rule, a kernel pass
//     the workers' pass;
//   - a frame the kernel steers on either matched no kernel rule or was
//     not parsed in the kernel, and then the workers did not parse it as a
//     plain OK IPv4 or IPv6 packet either (no frame the kernel could
//     decide is left undecided);
//   - the per-rule kernel hit counters equal the workers' per-rule counts
//     of the decided frames.
func TestOffloadAgreesWithReplay(t *testing.T) {
	requireRoot(t)
	inNewNetns(t)
	p, err := LoadProgram(ProgramOptions{Interface: "lo", Attach: AttachGeneric, Queues: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })

	g, plan, err := pipelines.LoadOffload("offload-oracle.yaml", []byte(offloadTestYAML), pipelines.OffloadAuto)
	if err != nil {
		t.Fatal(err)
	}
	if plan.Moved != 13 {
		t.Fatalf("plan moved %d rules, want 13:\n%s", plan.Moved, plan.Explain())
	}
	rules := OffloadRules(plan.Kernel)
	gen, err := p.LoadRules(&rules)
	if err != nil {
		t.Fatal(err)
	}
	// label -> kernel rule index, for the rules the kernel may fire.
	ruleOf := map[string]int{}
	for _, r := range plan.Rules[:plan.Moved] {
		key := "pass"
		if r.Verdict == rings.VerdictDrop {
			key = "drop:" + r.Label
		}
		ruleOf[key] = r.Index
	}

	arena, err := rings.NewArena(rings.DefaultArenaOptions())
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := arena.Alloc()
	b := rings.NewBatch(1, arena)
	runner := g.NewRunner(pipelines.RunnerOptions{})
	reasons := g.Reasons()
	workers := func(pkt []byte) (string, rings.Meta) {
		f := arena.Frame(addr)
		off := int(addr) & (arena.FrameSize() - 1)
		copy(f[off:], pkt)
		b.Clear()
		b.Append(rings.Desc{Addr: addr, Len: uint32(len(pkt))}, 0, 0)
		runner.Process(b)
		m := b.Meta[0]
		switch m.Verdict {
		case rings.VerdictDrop:
			return "drop:" + reasons[m.Target], m
		case rings.VerdictPass:
			return "pass", m
		case rings.VerdictTX:
			return "tx", m
		}
		return "none", m
	}

	rnd := rand.New(rand.NewPCG(1, 2))
	var frames [][]byte
	files := offloadCaptures(t)
	originals := 0
	for _, f := range files {
		for _, pkt := range readEthernetPackets(t, f) {
			if len(pkt) > 3000 {
				continue // beyond what BPF_PROG_TEST_RUN takes in one buffer
			}
			originals++
			frames = append(frames, pkt)
			// Truncated and corrupted copies: every way the parsers must
			// agree to give up.
			for range 4 {
				if len(pkt) > 14 {
					frames = append(frames, pkt[:14+rnd.IntN(len(pkt)-14)])
				}
				if len(pkt) <= 12 {
					continue
				}
				c := append([]byte(nil), pkt...)
				i := 12 + rnd.IntN(min(len(c), 80)-12)
				c[i] ^= byte(1 + rnd.IntN(255))
				frames = append(frames, c)
			}
		}
	}
	if originals < 500 {
		t.Fatalf("only %d packets in %d captures: too few to mean anything", originals, len(files))
	}

	var decided, steered, unparsed int
	perRule := make([]uint64, plan.Moved)
	verdicts := map[string]int{}
	last, _ := p.Counters(0)
	for n, pkt := range frames {
		if len(pkt) < 14 {
			continue // the test run refuses frames shorter than Ethernet
		}
		ret, err := p.objs.XskRedirect.Run(&ebpf.RunOptions{Data: pkt, Context: testRunCtx{DataEnd: uint32(len(pkt))}})
		if err != nil {
			t.Fatalf("frame %d: test run: %v", n, err)
		}
		c, err := p.Counters(0)
		if err != nil {
			t.Fatal(err)
		}
		d := QueueCounters{Dropped: c.Dropped - last.Dropped, Passed: c.Passed - last.Passed, NoSocket: c.NoSocket - last.NoSocket,
			OffUnparsed: c.OffUnparsed - last.OffUnparsed, OffNoMatch: c.OffNoMatch - last.OffNoMatch, OffRaced: c.OffRaced - last.OffRaced}
		last = c
		want, m := workers(pkt)
		rule, byKernelRule := ruleOf[want]
		fail := func(format string, a ...any) {
			t.Fatalf("frame %d (%d bytes, class %v, flags %#x): %s\n% x", n, len(pkt), m.Class, m.Flags, fmt.Sprintf(format, a...), pkt[:min(len(pkt), 96)])
		}
		switch {
		case d.Dropped == 1 && ret == xdpDrop:
			if !byKernelRule || want == "pass" {
				fail("kernel dropped, workers say %s", want)
			}
			decided++
			perRule[rule]++
		case d.Passed == 1 && ret == xdpPass:
			if want != "pass" {
				fail("kernel passed, workers say %s", want)
			}
			decided++
			perRule[rule]++
		case d.NoSocket == 1 && ret == xdpPass:
			steered++
			switch {
			case d.OffUnparsed == 1:
				unparsed++
				if kernelShape(pkt, &m) {
					fail("the kernel did not parse a frame the workers parse as plain IP (workers: %s)", want)
				}
			case d.OffNoMatch == 1:
				if !kernelShape(pkt, &m) {
					fail("the kernel parsed a frame the workers do not class as plain OK IP (workers: %s)", want)
				}
				if byKernelRule && rule != 0 {
					fail("no kernel rule matched, workers matched kernel rule %d (%s)", rule, want)
				}
			default:
				fail("steered with counters %+v", d)
			}
		default:
			fail("action %d with counter deltas %+v", ret, d)
		}
		verdicts[want]++
	}
	hits, err := p.RuleCounters(gen)
	if err != nil {
		t.Fatal(err)
	}
	for i := range perRule {
		if hits[i].Packets != perRule[i] {
			t.Errorf("rule %d: kernel counted %d hits, the workers' verdicts give %d", i, hits[i].Packets, perRule[i])
		}
	}
	var vs []string
	for v, n := range verdicts {
		vs = append(vs, fmt.Sprintf("%s=%d", v, n))
	}
	sort.Strings(vs)
	t.Logf("%d captures, %d packets (+ %d variants): %d decided in the kernel, %d steered (%d not parsed there); workers' verdicts %s; kernel hits per rule %v",
		len(files), originals, len(frames)-originals, decided, steered, unparsed, strings.Join(vs, " "), perRule)
	// Every kernel rule that can fire fired, so each field's table was
	// exercised.
	for i := 1; i < plan.Moved; i++ {
		if perRule[i] == 0 {
			t.Errorf("kernel rule %d (%s) never fired: the captures do not exercise it", i, plan.Rules[i].Action)
		}
	}
}
