package xdp

import (
	"encoding/binary"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/warpflow/warpflow/pipelines"

	"github.com/warpflow/warpflow/internal/testwait"
)

// udp4Frame is a 64-byte Ethernet/IPv4/UDP frame from 10.0.0.1 to
// 10.0.0.2 with the given destination port.
func udp4Frame(dport uint16) []byte {
	f := make([]byte, 64)
	binary.BigEndian.PutUint16(f[12:], 0x0800)
	ip := f[14:]
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], 50-14+14) // 20 IP + 8 UDP + 22 payload
	ip[8], ip[9] = 64, 17
	copy(ip[12:], []byte{10, 0, 0, 1, 10, 0, 0, 2})
	binary.BigEndian.PutUint16(ip[20:], 4000)
	binary.BigEndian.PutUint16(ip[22:], dport)
	binary.BigEndian.PutUint16(ip[24:], 30)
	return f
}

// kernelRulesOf plans a pipeline whose filter has the given rules (all
// meant to move) and returns its kernel rule set.
func kernelRulesOf(t testing.TB, rules string) *OffloadRules {
	t.Helper()
	src := "name: t\nstages:\n  - {name: parse, type: parse}\n  - name: f\n    type: filter\n    default: k\n    rules:\n" + rules +
		"  - {name: out, type: tx, port: o}\n  - {name: k, type: pass}\n"
	_, p, err := pipelines.LoadOffload("t.yaml", []byte(src), pipelines.OffloadAuto)
	if err != nil {
		t.Fatal(err)
	}
	r := OffloadRules(p.Kernel)
	return &r
}

func loadedProgram(t testing.TB) *Program {
	t.Helper()
	requireRoot(t)
	inNewNetns(t)
	p, err := LoadProgram(ProgramOptions{Interface: "lo", Attach: AttachGeneric, Queues: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func runFrame(t *testing.T, p *Program, f []byte) uint32 {
	ret, err := p.objs.XskRedirect.Run(&ebpf.RunOptions{Data: f, Context: testRunCtx{DataEnd: uint32(len(f))}})
	if err != nil {
		t.Fatalf("test run: %v", err)
	}
	return ret
}

// TestLoadRules: sets replace each other, counters follow generations,
// bad sets are refused with the active set kept, a slot being written is
// left to the workers, and Close ends loading.
func TestLoadRules(t *testing.T) {
	p := loadedProgram(t)
	drop9 := kernelRulesOf(t, `      - {proto: udp, dst_port: 9, action: "drop:nine"}
      - {proto: udp, dst_port: 7, action: k}
`)
	if p.RuleGeneration() != 0 {
		t.Fatalf("generation %d before any load", p.RuleGeneration())
	}
	// No rules: steered (no socket: passed), counted as such.
	if ret := runFrame(t, p, udp4Frame(9)); ret != xdpPass {
		t.Fatalf("no rules: action %d", ret)
	}
	g1, err := p.LoadRules(drop9)
	if err != nil || g1 != 1 {
		t.Fatalf("load: gen %d, %v", g1, err)
	}
	for i := 0; i < 3; i++ {
		if ret := runFrame(t, p, udp4Frame(9)); ret != xdpDrop {
			t.Fatalf("port 9 under drop9: action %d", ret)
		}
	}
	if ret := runFrame(t, p, udp4Frame(7)); ret != xdpPass {
		t.Fatalf("port 7 under drop9: action %d", ret)
	}
	runFrame(t, p, udp4Frame(8))
	c, _ := p.Counters(0)
	if c.Packets != 6 || c.Dropped != 3 || c.Passed != 1 || c.NoSocket != 2 || c.OffNoMatch != 1 || c.OffUnparsed != 0 {
		t.Fatalf("counters %+v", c)
	}
	if c.Packets != c.Redirected+c.NoSocket+c.RedirectFailed+c.Dropped+c.Passed {
		t.Fatalf("counters do not balance: %+v", c)
	}
	hits, err := p.RuleCounters(g1)
	if err != nil || len(hits) != 2 || hits[0].Packets != 3 || hits[0].Bytes != 3*64 || hits[1].Packets != 1 {
		t.Fatalf("rule counters %+v, %v", hits, err)
	}

	// Replace: only port 8 dropped now; gen 1's counters are still there.
	drop8 := kernelRulesOf(t, `      - {proto: udp, dst_port: 8, action: "drop:eight"}
`)
	g2, err := p.LoadRules(drop8)
	if err != nil || g2 != 2 {
		t.Fatalf("load 2: gen %d, %v", g2, err)
	}
	if runFrame(t, p, udp4Frame(9)) != xdpPass || runFrame(t, p, udp4Frame(8)) != xdpDrop {
		t.Fatal("drop8 not in force")
	}
	if h, err := p.RuleCounters(g1); err != nil || h[0].Packets != 3 {
		t.Fatalf("previous generation's counters %+v, %v", h, err)
	}
	if h, err := p.RuleCounters(g2); err != nil || len(h) != 1 || h[0].Packets != 1 {
		t.Fatalf("generation 2 counters %+v, %v", h, err)
	}
	// Back to drop9 in slot 1: its counters start at zero.
	g3, err := p.LoadRules(drop9)
	if err != nil {
		t.Fatal(err)
	}
	if runFrame(t, p, udp4Frame(9)) != xdpDrop {
		t.Fatal("drop9 not in force again")
	}
	if h, _ := p.RuleCounters(g3); h[0].Packets != 1 {
		t.Fatalf("generation 3 counters %+v: want a fresh count", h)
	}
	if _, err := p.RuleCounters(g1); err == nil {
		t.Error("counters of a generation two back: no error")
	}

	// Bad sets: refused, drop9 stays.
	bad := *drop9
	bad.Actions = []uint8{OffloadDrop, 7}
	short := *drop9
	short.SrcPort = short.SrcPort[:10]
	many := *drop9
	many.Actions = make([]uint8, MaxOffloadRules+1)
	for _, b := range []*OffloadRules{&bad, &short, &many} {
		if _, err := p.LoadRules(b); !errors.Is(err, errRuleSet) {
			t.Errorf("bad set: %v", err)
		}
	}
	if runFrame(t, p, udp4Frame(9)) != xdpDrop || p.RuleGeneration() != g3 {
		t.Fatal("a refused set changed the active one")
	}

	// A slot mid-write (odd sequence) is left to the workers.
	slot := uint32(g3 & 1)
	var seq uint64
	if err := p.objs.OffCtl.Lookup(uint32(ctlSeq0)+slot, &seq); err != nil {
		t.Fatal(err)
	}
	p.objs.OffCtl.Put(uint32(ctlSeq0)+slot, seq+1)
	before, _ := p.Counters(0)
	if runFrame(t, p, udp4Frame(9)) != xdpPass {
		t.Fatal("frame decided while its slot was being written")
	}
	after, _ := p.Counters(0)
	if after.OffRaced != before.OffRaced+1 {
		t.Fatalf("raced count %d -> %d", before.OffRaced, after.OffRaced)
	}
	p.objs.OffCtl.Put(uint32(ctlSeq0)+slot, seq)

	// An empty set: the kernel decides nothing.
	if _, err := p.LoadRules(nil); err != nil {
		t.Fatal(err)
	}
	if runFrame(t, p, udp4Frame(9)) != xdpPass {
		t.Fatal("empty set decided a frame")
	}
	p.Close()
	if _, err := p.LoadRules(drop9); !errors.Is(err, net.ErrClosed) {
		t.Errorf("load after close: %v", err)
	}
}

// TestStageRules: a staged set changes nothing for any frame until
// Activate, which flips it in with one write and keeps the previous set's
// counters; a discarded one leaves everything as it was; one staged set
// at a time; Activate from many goroutines at once succeeds once.
func TestStageRules(t *testing.T) {
	p := loadedProgram(t)
	drop9 := kernelRulesOf(t, `      - {proto: udp, dst_port: 9, action: "drop:nine"}
`)
	drop8 := kernelRulesOf(t, `      - {proto: udp, dst_port: 8, action: "drop:eight"}
`)
	g1, err := p.LoadRules(drop9)
	if err != nil {
		t.Fatal(err)
	}
	runFrame(t, p, udp4Frame(9))
	s, err := p.StageRules(drop8)
	if err != nil || s.Generation() != g1+1 || s.Active() {
		t.Fatalf("stage: %+v, %v", s, err)
	}
	if _, err := p.StageRules(drop9); !errors.Is(err, ErrStaged) {
		t.Fatalf("a second stage while one is staged: %v", err)
	}
	// Staged, not in force: drop9 still decides, its counters count on,
	// and the generation is the old one.
	if runFrame(t, p, udp4Frame(9)) != xdpDrop || runFrame(t, p, udp4Frame(8)) != xdpPass || p.RuleGeneration() != g1 {
		t.Fatal("a staged set is in force before Activate")
	}
	if h, err := p.RuleCounters(g1); err != nil || h[0].Packets != 2 {
		t.Fatalf("active set's counters while another is staged: %+v, %v", h, err)
	}
	if _, err := p.RuleCounters(s.Generation()); err == nil {
		t.Fatal("counters of a staged generation: no error")
	}
	// Activate from 8 goroutines at once: one write, every call succeeds.
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() { defer wg.Done(); errs <- s.Activate() }()
	}
	testwait.Group(t, &wg, "8 concurrent Activate calls to return", testwait.Deadline)
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("activate: %v", err)
		}
	}
	if !s.Active() || s.Discard() || p.RuleGeneration() != s.Generation() {
		t.Fatalf("after activate: active %v, generation %d", s.Active(), p.RuleGeneration())
	}
	if runFrame(t, p, udp4Frame(8)) != xdpDrop || runFrame(t, p, udp4Frame(9)) != xdpPass {
		t.Fatal("the activated set is not in force")
	}
	if h, err := p.RuleCounters(g1); err != nil || h[0].Packets != 2 {
		t.Fatalf("previous set's counters after the flip: %+v, %v", h, err)
	}
	if h, err := p.RuleCounters(s.Generation()); err != nil || len(h) != 1 || h[0].Packets != 1 {
		t.Fatalf("new set's counters: %+v, %v", h, err)
	}

	// Stage drop9 over g1's slot and discard it: drop8 stays in force,
	// g1's counters are still readable, and the next stage is allowed.
	d, err := p.StageRules(drop9)
	if err != nil {
		t.Fatal(err)
	}
	if !d.Discard() || d.Activate() == nil {
		t.Fatal("a discarded set could be activated")
	}
	if runFrame(t, p, udp4Frame(8)) != xdpDrop || runFrame(t, p, udp4Frame(9)) != xdpPass || p.RuleGeneration() != s.Generation() {
		t.Fatal("a discarded set changed what is in force")
	}
	if h, err := p.RuleCounters(g1); err != nil || h[0].Packets != 2 {
		t.Fatalf("previous set's counters after a discarded stage over its slot: %+v, %v", h, err)
	}
	g4, err := p.LoadRules(drop9)
	if err != nil || g4 != s.Generation()+1 {
		t.Fatalf("load after a discard: gen %d, %v", g4, err)
	}
	if runFrame(t, p, udp4Frame(9)) != xdpDrop {
		t.Fatal("drop9 not in force after the load")
	}
	if h, _ := p.RuleCounters(g4); h[0].Packets != 1 {
		t.Fatalf("generation %d counters %+v: want a fresh count", g4, h)
	}
}

// TestLoadRulesSwapNoMix swaps two rule sets as fast as it can while
// frames run through the program, each load rewriting a slot that held
// the other set. Set A drops port 9 (rule 0) and passes
// port 7 (rule 1); set B passes port 5 (rule 0) and nothing else. A frame
// to port 9 may be dropped (A) or steered (B), never passed: that would be
// A's tables with B's action for rule 0, a mix of the two.
func TestLoadRulesSwapNoMix(t *testing.T) {
	p := loadedProgram(t)
	a := kernelRulesOf(t, `      - {proto: udp, dst_port: 9, action: "drop:nine"}
      - {proto: udp, dst_port: 7, action: k}
`)
	b := kernelRulesOf(t, `      - {proto: udp, dst_port: 5, action: k}
`)
	// Both slots written once, so the loads below rewrite only what differs.
	for _, set := range []*OffloadRules{b, a} {
		if _, err := p.LoadRules(set); err != nil {
			t.Fatal(err)
		}
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	var loads atomic.Int64
	var loadErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			set := a
			if (loads.Load()/2)%2 == 0 {
				set = b
			}
			if _, err := p.LoadRules(set); err != nil {
				loadErr = err
				return
			}
			loads.Add(1)
		}
	}()
	// Many runs per syscall, so that loads (on another thread; the
	// runtime hands the P over during a long syscall) overlap them.
	f := udp4Frame(9)
	deadline := time.Now().Add(2 * time.Second) // bounds the run's length, not a wait: the loads are counted below
	const repeat = 2000
	var n int
	for n = 0; loads.Load() < 300 && time.Now().Before(deadline); n += repeat {
		if _, err := p.objs.XskRedirect.Run(&ebpf.RunOptions{Data: f, Context: testRunCtx{DataEnd: uint32(len(f))}, Repeat: repeat}); err != nil {
			t.Fatal(err)
		}
	}
	stop.Store(true)
	testwait.Group(t, &wg, "the rule loader to stop after its current load", testwait.Deadline)
	if loadErr != nil {
		t.Fatal(loadErr)
	}
	c, _ := p.Counters(0)
	if c.Passed != 0 {
		t.Fatalf("%d frames to port 9 passed by a kernel rule: a mix of two rule sets (counters %+v)", c.Passed, c)
	}
	if c.Dropped == 0 || c.NoSocket == 0 || loads.Load() < 20 {
		t.Fatalf("weak run: %d frames, %d loads, counters %+v", n, loads.Load(), c)
	}
	// A run interrupted by a signal is run again whole (cilium/ebpf
	// retries EINTR), so the program may see more frames than sent.
	if c.Packets < uint64(n) || c.Packets != c.Dropped+c.NoSocket {
		t.Fatalf("%d frames, counters %+v", n, c)
	}
	t.Logf("%d frames over %d loads: %d dropped (A), %d steered (B: %d no match, %d raced)", n, loads.Load(), c.Dropped, c.NoSocket, c.OffNoMatch, c.OffRaced)
}

// TestOffloadSizesAgree: pipelines builds tables of the sizes the program
// reads (the struct conversion above checks the fields).
func TestOffloadSizesAgree(t *testing.T) {
	for _, c := range [][2]int{
		{pipelines.KernelMaxRules, MaxOffloadRules}, {pipelines.KernelL3Len, OffloadL3Len},
		{pipelines.KernelPortLen, OffloadPortLen}, {pipelines.KernelVLANLen, OffloadVLANLen},
		{pipelines.KernelTCPLen, OffloadTCPLen}, {pipelines.KernelMaxPrefixes, MaxOffloadPrefixes},
		{pipelines.KernelDrop, OffloadDrop}, {pipelines.KernelPass, OffloadPass},
	} {
		if c[0] != c[1] {
			t.Errorf("pipelines %d, xdp %d", c[0], c[1])
		}
	}
}
