package gpu

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/warpflow/warpflow/dataplane"
	"github.com/warpflow/warpflow/pipelines"
	"github.com/warpflow/warpflow/rings"
)

// captures returns the testdata captures and every capture of the corpus:
// $WARPFLOW_CORPUS when set, else the repository's copy, testdata/corpus.
func captures(t *testing.T) []string {
	t.Helper()
	files, _ := filepath.Glob("../testdata/captures/*.pcap")
	if len(files) == 0 {
		t.Fatal("no captures in ../testdata/captures")
	}
	var corpus []string
	for _, dir := range []string{os.Getenv("WARPFLOW_CORPUS"), "../testdata/corpus"} {
		if dir == "" {
			continue
		}
		if c, _ := filepath.Glob(filepath.Join(dir, "*.pcap")); len(c) > 0 {
			corpus = c
			break
		}
	}
	if len(corpus) == 0 {
		t.Log("no corpus found in testdata/corpus or $WARPFLOW_CORPUS; testdata captures only")
	}
	return append(files, corpus...)
}

// aclYAML writes a pipeline of about n filter rules drawn from the
// captures' own traffic (so that rules hit), mixed with wildcard, VLAN,
// class, flag and IPv6 rules, every action a terminal.
func aclYAML(t *testing.T, n int, files []string, seed uint64) string {
	t.Helper()
	rnd := rand.New(rand.NewPCG(seed, 1))
	var tuples []string
	for _, f := range files {
		a, err := rings.NewArena(rings.ArenaOptions{Frames: 512, FrameSize: 4096, Headroom: 256})
		if err != nil {
			t.Fatal(err)
		}
		p, err := dataplane.OpenReplay(f, a, dataplane.DefaultReplayOptions())
		if err != nil {
			continue
		}
		b := rings.NewBatch(256, a)
		for {
			b.Clear()
			k, err := p.Receive(b)
			for i := range k {
				var key pipelines.FilterKey
				pipelines.FilterKeyOfPacket(b.Packet(i), true, &key)
				if fam := key[dL3] >> 9; fam == 1 && rnd.IntN(3) == 0 {
					src := netip.AddrFrom4([4]byte{byte(key[dSrcHi] >> 56), byte(key[dSrcHi] >> 48), byte(key[dSrcHi] >> 40), byte(key[dSrcHi] >> 32)})
					r := fmt.Sprintf("{src: %s/%d", src, []int{32, 24, 16}[rnd.IntN(3)])
					if key[dDport] != noPort {
						r += fmt.Sprintf(", dst_port: %d", key[dDport])
					}
					tuples = append(tuples, r)
				}
			}
			p.Recycle(b.Descs)
			if err != nil || k == 0 {
				break
			}
		}
		p.Close()
	}
	actions := []string{"accept", `"drop:acl"`, "web", "kernel"}
	var sb strings.Builder
	sb.WriteString("name: acl\nstages:\n  - {name: parse, type: parse}\n  - name: acl\n    type: filter\n    default: \"drop:unmatched\"\n    rules:\n")
	fixed := []string{
		"{class: malformed, action: \"drop:malformed\"}",
		"{proto: tcp, dst_port: 23, action: \"drop:telnet\"}",
		"{vlan: [1-100], tcp_flags: \"syn,!ack\", action: web}",
		"{src: [2001:db8::/32, fe80::/10], action: kernel}",
		"{proto: [icmp, icmpv6], action: kernel}",
		"{fragment: true, action: \"drop:frag\"}",
		"{proto: udp, dst_port: [53, 5353, 67-68], action: kernel}",
	}
	for i := 0; i < n; i++ {
		var r string
		switch {
		case i < len(fixed):
			r = fixed[i]
		case len(tuples) > 0 && rnd.IntN(2) == 0:
			r = tuples[rnd.IntN(len(tuples))] + ", action: " + actions[rnd.IntN(len(actions))] + "}"
		default:
			r = fmt.Sprintf("{src: 10.%d.%d.0/24, dst_port: %d, action: %s}", rnd.IntN(256), rnd.IntN(256), 1+rnd.IntN(65535), actions[rnd.IntN(len(actions))])
		}
		sb.WriteString("      - " + r + "\n")
	}
	sb.WriteString("  - {name: web, type: tx, port: web0}\n  - {name: kernel, type: pass}\n")
	return sb.String()
}

// eqStats sums an equality run.
type eqStats struct{ packets, fallbacks uint64 }

// checkPipeline replays every file through c and through g's CPU runner
// and checks, packet by packet, that the classifier's answer (the kernel's
// rule, or for a packet it hands back the CPU lookup over the same blob)
// gives the CPU path's verdict and target, and at the end (kernel stopped)
// that the kernel's counters plus the handed-back packets equal the filter
// stage's per-rule counters. The program is loaded before the first
// Submit (see Classifier.Load).
func checkPipeline(t *testing.T, c *Classifier, g *pipelines.Graph, files []string) eqStats {
	t.Helper()
	var st eqStats
	fp, err := pipelines.GraphFilter(g)
	if err != nil {
		t.Fatal(err)
	}
	if !fp.AllTerminal() {
		t.Fatal("test pipeline must end at terminals after its filter")
	}
	prog, err := c.Load(fp.Blob)
	if err != nil {
		t.Fatal(err)
	}
	o := c.Options()
	a, err := rings.NewArenaOn(c.Arena(), rings.ArenaOptions{Frames: len(c.Arena()) / o.FrameSize, FrameSize: o.FrameSize, Headroom: 256})
	if err != nil {
		t.Fatal(err)
	}
	runner := g.NewRunner(pipelines.RunnerOptions{})
	rules := fp.Blob.Rules
	fbPkts, fbBytes := make([]uint64, rules+1), make([]uint64, rules+1)
	b := rings.NewBatch(min(o.SlotCap, rings.MaxBatch), a)
	got := make([]uint32, b.Cap())
	for _, file := range files {
		p, err := dataplane.OpenReplay(file, a, dataplane.DefaultReplayOptions())
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		for pkt := 0; ; {
			b.Clear()
			n, rerr := p.Receive(b)
			if n > 0 {
				s := waitAcquire(t, c)
				copy(s.Descs, b.Descs)
				c.Submit(n, prog)
				s = waitCompleted(t, c)
				copy(got, s.Results[:n])
				c.Release()
				runner.Process(b)
				for i := range n {
					r := got[i]
					st.packets++
					if r == Fallback {
						st.fallbacks++
						var k pipelines.FilterKey
						pipelines.FilterKeyOfPacket(b.Packet(i), fp.ParseTunnels, &k)
						r = uint32(fp.Blob.Lookup(&k))
						fbPkts[r]++
						fbBytes[r] += uint64(b.Descs[i].Len)
					} else if int(r) > rules {
						t.Fatalf("%s packet %d: kernel wrote rule %d of %d", filepath.Base(file), pkt+i, r, rules)
					}
					m := &b.Meta[i]
					if m.Verdict != fp.Verdict[r] || m.Target != fp.Target[r] {
						t.Fatalf("%s packet %d: backend says rule %d (verdict %d target %d), CPU path verdict %d target %d",
							filepath.Base(file), pkt+i, r, fp.Verdict[r], fp.Target[r], m.Verdict, m.Target)
					}
				}
				pkt += n
			}
			p.Recycle(b.Descs)
			if errors.Is(rerr, io.EOF) {
				break
			}
			if rerr != nil {
				t.Fatalf("%s: %v", file, rerr)
			}
		}
		p.Close()
	}
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	gp, gb, err := c.Counters(prog)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][2]uint64{}
	for _, sc := range runner.Counters(nil) {
		if sc.Stage == "acl" || sc.Stage == "classify" {
			want[sc.Key] = [2]uint64{sc.Packets, sc.Bytes}
		}
	}
	for r := 0; r <= rules; r++ {
		key := fmt.Sprintf("rule[%d]", r)
		if r == rules {
			key = "default"
		}
		have := [2]uint64{gp[r] + fbPkts[r], gb[r] + fbBytes[r]}
		if have != want[key] {
			t.Fatalf("%s: %s: backend counts %v packets/bytes (kernel %d/%d), CPU path %v", g.Name(), key, have, gp[r], gb[r], want[key])
		}
	}
	return st
}

func waitAcquire(t *testing.T, c *Classifier) *Slot {
	deadline := time.Now().Add(10 * time.Second)
	for {
		if s, ok := c.Acquire(); ok {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatal("no free slot in 10s")
		}
	}
}

func waitCompleted(t *testing.T, c *Classifier) *Slot {
	wait := 10 * time.Second
	if os.Getenv("WARPFLOW_PROBE") != "" {
		wait = 2 * time.Second
	}
	deadline := time.Now().Add(wait)
	sleep := os.Getenv("WARPFLOW_PROBE") == "sleep"
	for i := 0; ; i++ {
		if s, ok := c.Completed(); ok {
			return s
		}
		if sleep {
			time.Sleep(time.Microsecond)
		}
		if i%4096 == 4095 {
			if err := c.Err(); err != nil {
				t.Fatal(err)
			}
			if time.Now().After(deadline) {
				t.Fatalf("slot not done in %v; kernel reports %#x", wait, c.debugWords())
			}
		}
	}
}

// openFor opens a classifier for a test: emulated, or on the GPU (the test
// skips with the reason when there is none).
func openFor(t *testing.T, emulate bool) *Classifier {
	t.Helper()
	o := DefaultOptions()
	o.Emulate = emulate
	o.SlotCap = 256
	if !emulate {
		if err := Available(); err != nil {
			t.Skip(err)
		}
		o.Blocks, o.Slots = 8, 16
	}
	c, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	})
	return c
}

func runEquality(t *testing.T, emulate bool) {
	files := captures(t)
	split, err := pipelines.LoadFile("../testdata/pipelines/valid/split.yaml")
	if err != nil {
		t.Fatal(err)
	}
	graphs := []*pipelines.Graph{split}
	for i, n := range []int{50, 2000} {
		g, err := pipelines.Load("acl.yaml", []byte(aclYAML(t, n, files, uint64(i))))
		if err != nil {
			t.Fatal(err)
		}
		graphs = append(graphs, g)
	}
	var total eqStats
	var desc string
	for _, g := range graphs {
		c := openFor(t, emulate) // one per pipeline: its program loaded before the first Submit
		desc = c.Describe()
		st := checkPipeline(t, c, g, files)
		total.packets += st.packets
		total.fallbacks += st.fallbacks
	}
	t.Logf("%s: %d captures x %d pipelines, %d packets, %d handed back to the CPU path (%.1f%%), 0 mismatches",
		desc, len(files), len(graphs), total.packets, total.fallbacks, 100*float64(total.fallbacks)/float64(max(total.packets, 1)))
	if total.packets == total.fallbacks {
		t.Fatal("the kernel classified no packet itself")
	}
}

// TestEqualityEmulated runs the equality check with the kernel played in
// Go: the host side of the protocol, in CI.
func TestEqualityEmulated(t *testing.T) { runEquality(t, true) }

// TestEqualityCUDA runs it on the GPU; it skips, with the reason, where
// there is none.
func TestEqualityCUDA(t *testing.T) { runEquality(t, false) }

// TestProbeCUDA is the first look at a GPU: the kernel runs (block 0's
// alive word), one packet goes through a slot and back with the CPU
// lookup's answer, and the kernel stops when asked.
func TestProbeCUDA(t *testing.T) {
	if err := Available(); err != nil {
		t.Skip(err)
	}
	o := DefaultOptions()
	o.Blocks, o.Slots, o.SlotCap = 2, 2, 16
	c, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	t.Logf("%s", c.Describe())
	y, srcs := benchRules(100, rand.New(rand.NewPCG(1, 2)))
	g, err := pipelines.Load("probe.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	fp, _ := pipelines.GraphFilter(g)
	prog, err := c.Load(fp.Blob)
	if err != nil {
		t.Fatal(err)
	}
	a, err := rings.NewArenaOn(c.Arena(), rings.ArenaOptions{Frames: len(c.Arena()) / o.FrameSize, FrameSize: o.FrameSize, Headroom: 256})
	if err != nil {
		t.Fatal(err)
	}
	descs := benchFrames(a, 64, srcs, rand.New(rand.NewPCG(3, 4)))
	for round := range 4 {
		s := waitAcquire(t, c)
		n := copy(s.Descs, descs[round*16:])
		t0 := time.Now()
		c.Submit(n, prog)
		s = waitCompleted(t, c)
		dt := time.Since(t0)
		var k pipelines.FilterKey
		for i := range n {
			d := s.Descs[i]
			want := Fallback
			if parseCommon(c.Arena()[d.Addr:d.Addr+64], int(d.Len), 64, &k) {
				want = uint32(fp.Blob.Lookup(&k))
			}
			if s.Results[i] != want {
				t.Errorf("round %d packet %d: kernel %d, CPU %d", round, i, s.Results[i], want)
			}
		}
		c.Release()
		t.Logf("round %d: %d packets in %v, kernel reports %#x", round, n, dt, c.debugWords())
		if c.debugWords()[0] != 0xC0DE0003 {
			t.Errorf("no alive marker from block 0")
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestSwapEmulated: a program loaded while the kernel runs is used from
// the next slot submitted with it, without relaunching, while slots
// already in flight with the old one finish with the old one's answers.
func TestSwapEmulated(t *testing.T) { runSwap(t, true) }

// TestSwapCUDA: the same on the GPU (skipped, with the reason, without).
func TestSwapCUDA(t *testing.T) { runSwap(t, false) }

func runSwap(t *testing.T, emulate bool) {
	c := openFor(t, emulate)
	o := c.Options()
	a, err := rings.NewArenaOn(c.Arena(), rings.ArenaOptions{Frames: len(c.Arena()) / o.FrameSize, FrameSize: o.FrameSize, Headroom: 256})
	if err != nil {
		t.Fatal(err)
	}
	rnd := rand.New(rand.NewPCG(9, 9))
	var blobs []*pipelines.FilterBlob
	var all []uint32
	for _, n := range []int{200, 300} {
		y, srcs := benchRules(n, rnd)
		g, err := pipelines.Load("s.yaml", []byte(y))
		if err != nil {
			t.Fatal(err)
		}
		fp, _ := pipelines.GraphFilter(g)
		blobs = append(blobs, fp.Blob)
		all = append(all, srcs...)
	}
	descs := benchFrames(a, 512, all, rnd)
	check := func(s *Slot, b *pipelines.FilterBlob) {
		t.Helper()
		var k pipelines.FilterKey
		hit := 0
		for i := range s.Count() {
			d := s.Descs[i]
			want := Fallback
			if parseCommon(c.Arena()[d.Addr:d.Addr+64], int(d.Len), 64, &k) {
				want = uint32(b.Lookup(&k))
			}
			if s.Results[i] != want {
				t.Fatalf("slot %d packet %d: %d, want %d", s.Seq(), i, s.Results[i], want)
			}
			if int(want) < b.Rules {
				hit++
			}
		}
		t.Logf("slot %d: %d of %d packets hit a rule", s.Seq(), hit, s.Count())
	}
	// The programs have 200 and 300 rules, so even a default answer (the
	// rule count) tells which program classified a packet.
	p0, err := c.Load(blobs[0])
	if err != nil {
		t.Fatal(err)
	}
	for round := range 3 {
		s := waitAcquire(t, c)
		copy(s.Descs, descs[round*128:(round+1)*128])
		c.Submit(128, p0)
		if round == 1 { // swap with one slot in flight
			p1, err := c.Load(blobs[1])
			if err != nil {
				t.Fatal(err)
			}
			check(waitCompleted(t, c), blobs[0])
			c.Release()
			s := waitAcquire(t, c)
			copy(s.Descs, descs[384:512])
			c.Submit(128, p1)
			check(waitCompleted(t, c), blobs[1])
			c.Release()
			p0 = p1
			blobs[0] = blobs[1]
			continue
		}
		check(waitCompleted(t, c), blobs[0])
		c.Release()
	}
}

// TestSlotPathNoAlloc: a slot's round trip (acquire, fill, submit,
// complete, release), the kernel emulated, allocates nothing.
func TestSlotPathNoAlloc(t *testing.T) {
	c := openFor(t, true)
	o := c.Options()
	a, err := rings.NewArenaOn(c.Arena(), rings.ArenaOptions{Frames: len(c.Arena()) / o.FrameSize, FrameSize: o.FrameSize, Headroom: 256})
	if err != nil {
		t.Fatal(err)
	}
	y, srcs := benchRules(50, rand.New(rand.NewPCG(1, 1)))
	g, err := pipelines.Load("a.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	fp, _ := pipelines.GraphFilter(g)
	prog, err := c.Load(fp.Blob)
	if err != nil {
		t.Fatal(err)
	}
	descs := benchFrames(a, 64, srcs, rand.New(rand.NewPCG(2, 2)))
	round := func() {
		s := waitAcquire(t, c)
		copy(s.Descs, descs)
		c.Submit(len(descs), prog)
		waitCompleted(t, c)
		c.Release()
	}
	round() // the kernel's launch
	if n := testing.AllocsPerRun(50, round); n != 0 {
		t.Fatalf("%v allocations per slot", n)
	}
}

// TestOpenRefuses: a misaligned arena and more blocks than can be
// resident at once are errors naming the value, before anything runs.
func TestOpenRefuses(t *testing.T) {
	o := DefaultOptions()
	o.Emulate = true
	mem := make([]byte, 2*o.FrameSize+1)
	o.Arena = mem[1:]
	if _, err := Open(o); err == nil || !strings.Contains(err.Error(), "16-byte") {
		t.Errorf("misaligned arena: %v", err)
	}
	o.Arena = nil
	o.Blocks, o.Slots = 1<<21, 1<<21
	if _, err := Open(o); err == nil || !strings.Contains(err.Error(), "blocks 2097152") {
		t.Errorf("too many blocks: %v", err)
	}
}
