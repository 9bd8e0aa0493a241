package gpu

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/warpflow/warpflow/pipelines"
	"github.com/warpflow/warpflow/rings"
	"github.com/warpflow/warpflow/workers"
)

// probeYAML is a small pipeline with every kind of work the probe checks:
// the parse, a filter that hits, a NAT rewrite, a count, a balance.
const probeYAML = `name: probe
stages:
  - {name: parse, type: parse}
  - name: acl
    type: filter
    default: nat
    rules:
      - {proto: udp, action: "drop:udp"}
      - {proto: tcp, dst_port: 23, action: "drop:telnet"}
  - {name: nat, type: rewrite, swap_macs: true, ttl_decrement: true, snat: {addr: 198.51.100.1, port: 4000}}
  - {name: flows, type: count, by: [protocol]}
  - {name: spread, type: balance, to: [a, b]}
  - {name: a, type: tx, port: a}
  - {name: b, type: tx, port: b}
`

// writeFrames writes count 64-byte IPv4 TCP/UDP frames into a, one per
// frame, and returns their descriptors.
func writeFrames(a *rings.Arena, count int, rnd *rand.Rand) []rings.Desc {
	svc := []uint16{22, 23, 53, 80, 443, 3306, 8080}
	descs := make([]rings.Desc, 0, count)
	for range count {
		addr, ok := a.Alloc()
		if !ok {
			break
		}
		p := a.Frame(addr)[addr&uint64(a.FrameSize()-1):][:64]
		clear(p)
		for i := range 12 {
			p[i] = byte(rnd.IntN(256))
		}
		binary.BigEndian.PutUint16(p[12:], 0x0800)
		h := p[14:]
		h[0], h[8] = 0x45, byte(2+rnd.IntN(60))
		binary.BigEndian.PutUint32(h[12:], 10<<24|uint32(rnd.IntN(1<<24)))
		binary.BigEndian.PutUint32(h[16:], 10<<24|uint32(rnd.IntN(1<<24)))
		l := h[20:]
		binary.BigEndian.PutUint16(l[0:], uint16(1024+rnd.IntN(60000)))
		binary.BigEndian.PutUint16(l[2:], svc[rnd.IntN(len(svc))])
		if rnd.IntN(4) == 0 {
			h[9] = 17
			binary.BigEndian.PutUint16(h[2:], 28)
			binary.BigEndian.PutUint16(l[4:], 8)
		} else {
			h[9] = 6
			binary.BigEndian.PutUint16(h[2:], 40)
			l[12], l[13] = 5<<4, 0x02
		}
		descs = append(descs, rings.Desc{Addr: addr, Len: 64})
	}
	return descs
}

func newRand() *rand.Rand { return rand.New(rand.NewPCG(7, 7)) }

// runProbe is the first look at a kernel: a small kernel takes a few slots
// of one ring through the Kernel API (each with a deadline, the kernel's
// alive word reported when it misses one), and every verdict word and
// rewritten byte must be the CPU runner's on a copy of the same frames.
func runProbe(t *testing.T, o Options) {
	o.Rings, o.Slots, o.SlotCap = 1, 4, 64
	if !o.Emulate {
		o.Blocks = 2
	}
	k, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := k.Close(); err != nil {
			t.Error(err)
		}
	}()
	t.Logf("%s", k.Describe())
	g, err := pipelines.Load("probe.yaml", []byte(probeYAML))
	if err != nil {
		t.Fatal(err)
	}
	dp, err := pipelines.CompileDevice(g)
	if err != nil {
		t.Fatal(err)
	}
	prog, err := k.Load(dp)
	if err != nil {
		t.Fatal(err)
	}
	ao := rings.ArenaOptions{Frames: 256, FrameSize: 2048, Headroom: 256}
	dev, err := rings.NewArena(ao)
	if err != nil {
		t.Fatal(err)
	}
	cpu, err := rings.NewArena(ao)
	if err != nil {
		t.Fatal(err)
	}
	descs := writeFrames(dev, 256, rand.New(rand.NewPCG(3, 4)))
	copy(cpu.Mem(), dev.Mem())
	at, err := k.attach(dev.Mem(), ao.FrameSize)
	if err != nil {
		t.Fatal(err)
	}
	defer at.detach()
	runner := g.NewRunner(pipelines.RunnerOptions{})
	b := rings.NewBatch(64, cpu)
	for round := range 4 {
		seq, ok := at.r.acquire()
		if !ok {
			t.Fatalf("round %d: no free slot", round)
		}
		n := copy(at.r.descs(seq), descs[round*64:(round+1)*64])
		t0 := time.Now()
		at.submit(n, prog, 0)
		deadline := t0.Add(10 * time.Second)
		for !at.r.done(seq) {
			if err := k.Err(); err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: slot not done in 10s; kernel words %#x", round, k.debugWords())
			}
		}
		dt := time.Since(t0)
		if _, ok := at.r.completed(); !ok {
			t.Fatalf("round %d: done but not completed", round)
		}
		out := at.r.out(seq)
		b.Clear()
		for _, d := range descs[round*64 : round*64+n] {
			b.Append(d, 0, 0)
		}
		runner.Process(b)
		verd := at.r.verdicts(seq)
		for i := range n {
			m := &b.Meta[i]
			if want := workers.PackVerdict(m.Verdict, m.Target); verd[i] != want {
				t.Fatalf("round %d packet %d: verdict word %#x, CPU %#x", round, i, verd[i], want)
			}
			d := descs[round*64+i]
			if !bytes.Equal(dev.Mem()[d.Addr:d.Addr+64], cpu.Mem()[d.Addr:d.Addr+64]) {
				t.Fatalf("round %d packet %d: bytes % x, CPU % x", round, i, dev.Mem()[d.Addr:d.Addr+64], cpu.Mem()[d.Addr:d.Addr+64])
			}
		}
		at.r.release()
		t.Logf("round %d: %d packets in %v, %d handed back, kernel words %#x", round, n, dt, out.fallbacks, k.debugWords())
		if out.fallbacks != 0 {
			t.Errorf("round %d: %d plain TCP/UDP packets handed back", round, out.fallbacks)
		}
	}
	if !o.Emulate && k.debugWords()[0] != 0xC0DE0004 {
		t.Errorf("no alive marker from block 0")
	}
}

// TestProbeEmulated: the probe on the host build.
func TestProbeEmulated(t *testing.T) { runProbe(t, emulated(t)) }

// TestProbeCUDA: the probe on the GPU (skipped, with the reason, without).
func TestProbeCUDA(t *testing.T) { runProbe(t, onDevice(t)) }

// TestRegisterWhileRunningCUDA: frame memory registered while the kernel
// runs (a second I/O loop that starts later, a swap onto new memory) is
// usable at once: the registration does not wait for the device.
func TestRegisterWhileRunningCUDA(t *testing.T) { runRegisterWhileRunning(t, onDevice(t)) }

// TestRegisterWhileRunningEmulated is the same on the host build.
func TestRegisterWhileRunningEmulated(t *testing.T) { runRegisterWhileRunning(t, emulated(t)) }

func runRegisterWhileRunning(t *testing.T, o Options) {
	o.Rings, o.Slots, o.SlotCap = 2, 4, 64
	if !o.Emulate {
		o.Blocks = 4
	}
	k, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	g, err := pipelines.Load("probe.yaml", []byte(probeYAML))
	if err != nil {
		t.Fatal(err)
	}
	dp, err := pipelines.CompileDevice(g)
	if err != nil {
		t.Fatal(err)
	}
	prog, err := k.Load(dp)
	if err != nil {
		t.Fatal(err)
	}
	oneSlot := func(at *attachment, descs []rings.Desc) {
		t.Helper()
		seq, ok := at.r.acquire()
		if !ok {
			t.Fatal("no free slot")
		}
		n := copy(at.r.descs(seq), descs[:64])
		at.submit(n, prog, 0)
		deadline := time.Now().Add(10 * time.Second)
		for !at.r.done(seq) {
			if time.Now().After(deadline) {
				t.Fatalf("slot not done in 10s; kernel words %#x", k.debugWords())
			}
		}
		at.r.completed()
		at.r.release()
	}
	ao := rings.ArenaOptions{Frames: 256, FrameSize: 2048, Headroom: 256}
	a1, _ := rings.NewArena(ao)
	a2, _ := rings.NewArena(ao)
	d1 := writeFrames(a1, 64, newRand())
	d2 := writeFrames(a2, 64, newRand())
	at1, err := k.attach(a1.Mem(), ao.FrameSize)
	if err != nil {
		t.Fatal(err)
	}
	oneSlot(at1, d1) // the kernel runs from here
	done := make(chan error, 1)
	var at2 *attachment
	go func() {
		var err error
		at2, err = k.attach(a2.Mem(), ao.FrameSize)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("registering frame memory waited 10s for the running kernel")
	}
	oneSlot(at2, d2)
	oneSlot(at1, d1)
	at1.detach()
	at2.detach()
	// A ring taken again on the same memory reuses its registration.
	at3, err := k.attach(a1.Mem(), ao.FrameSize)
	if err != nil {
		t.Fatal(err)
	}
	oneSlot(at3, d1)
	at3.detach()
}
