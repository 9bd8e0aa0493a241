package gpu

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/warpflow/warpflow/pipelines"
	"github.com/warpflow/warpflow/rings"
	"github.com/warpflow/warpflow/workers"
)

// reuseYAML is swap i's pipeline: one rule whose port changes from swap to
// swap, so each program gives other verdicts on the same frames, and every
// program has the same size.
func reuseYAML(i int) string {
	ports := []int{22, 23, 53, 80, 443, 3306, 8080}
	return fmt.Sprintf(`name: reuse%d
stages:
  - {name: parse, type: parse}
  - name: acl
    type: filter
    default: out
    rules:
      - {proto: tcp, dst_port: %d, action: "drop:r%d"}
  - {name: out, type: tx, port: out}
`, i, ports[i%len(ports)], i)
}

// TestSwapReusesMemoryEmulated: a kernel that runs on while programs are
// swapped (each loaded beside the running one, the old one given back
// after its last slot) reuses the given-back memory once the kernel
// acknowledged its retire epoch: 20 swaps hold 2 regions, not 21, and
// every swap's verdicts are its own program's. A region whose epoch is not
// acknowledged is never reused (held acknowledgements: Load allocates).
func TestSwapReusesMemoryEmulated(t *testing.T) { runSwapReuse(t, emulated(t)) }

// TestSwapReusesMemoryCUDA is the same on the GPU: the reused memory is
// rewritten by the kernel's poller, and the verdicts show that no block
// read the old words from a cache.
func TestSwapReusesMemoryCUDA(t *testing.T) { runSwapReuse(t, onDevice(t)) }

func runSwapReuse(t *testing.T, o Options) {
	o.Rings, o.Slots, o.SlotCap = 1, 4, 64
	if !o.Emulate {
		o.Blocks = 8
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
	ao := rings.ArenaOptions{Frames: 256, FrameSize: 2048, Headroom: 256}
	dev, err := rings.NewArena(ao)
	if err != nil {
		t.Fatal(err)
	}
	descs := writeFrames(dev, 64, rand.New(rand.NewPCG(5, 6)))
	at, err := k.attach(dev.Mem(), ao.FrameSize)
	if err != nil {
		t.Fatal(err)
	}
	defer at.detach()

	load := func(i int) (*Program, *pipelines.Graph) {
		t.Helper()
		g, err := pipelines.Load("reuse.yaml", []byte(reuseYAML(i)))
		if err != nil {
			t.Fatal(err)
		}
		dp, err := pipelines.CompileDevice(g)
		if err != nil {
			t.Fatal(err)
		}
		p, err := k.Load(dp)
		if err != nil {
			t.Fatalf("swap %d: %v", i, err)
		}
		// A reused region's counters start at zero.
		c := make([]uint64, 2*dp.Counters)
		if err := k.Counters(p, c); err != nil {
			t.Fatalf("swap %d: %v", i, err)
		}
		for j, v := range c {
			if v != 0 {
				t.Fatalf("swap %d: counter word %d is %d before any slot", i, j, v)
			}
		}
		return p, g
	}
	// slot runs one slot with p and checks every verdict word against the
	// CPU runner of g (the frames are only read: nothing rewrites them).
	slot := func(i int, p *Program, g *pipelines.Graph) {
		t.Helper()
		seq, ok := at.r.acquire()
		if !ok {
			t.Fatalf("swap %d: no free slot", i)
		}
		n := copy(at.r.descs(seq), descs)
		at.submit(n, p, 0)
		deadline := time.Now().Add(10 * time.Second)
		for !at.r.done(seq) {
			if err := k.Err(); err != nil {
				t.Fatalf("swap %d: %v", i, err)
			}
			if time.Now().After(deadline) {
				t.Fatalf("swap %d: slot not done in 10s; kernel words %#x", i, k.debugWords())
			}
		}
		at.r.completed()
		b := rings.NewBatch(64, dev)
		for _, d := range descs[:n] {
			b.Append(d, 0, 0)
		}
		g.NewRunner(pipelines.RunnerOptions{}).Process(b)
		verd := at.r.verdicts(seq)
		drops := 0
		for j := range n {
			m := &b.Meta[j]
			if want := workers.PackVerdict(m.Verdict, m.Target); verd[j] != want {
				t.Fatalf("swap %d packet %d: verdict word %#x, its program's on the CPU %#x (an old program's words?)", i, j, verd[j], want)
			}
			if m.Verdict == rings.VerdictDrop {
				drops++
			}
		}
		if drops == 0 || drops == n {
			t.Fatalf("swap %d: %d of %d dropped: the test needs both verdicts", i, drops, n)
		}
		at.r.release()
	}

	const swaps = 20
	old, g := load(0)
	slot(0, old, g) // the kernel runs from here
	for i := 1; i <= swaps; i++ {
		p, g := load(i)
		slot(i, p, g)
		k.Unload(old)
		old = p
	}
	m := k.Memory()
	t.Logf("after %d swaps: %+v", swaps, m)
	if m.Allocations > 3 || m.Reused < swaps-2 || m.Unacknowledged != 0 {
		t.Errorf("after %d swaps: %+v; want at most 3 regions, each given-back one reused", swaps, m)
	}
	if m.Live != 1 || m.Live+m.Spare+m.Retiring != m.Allocations {
		t.Errorf("regions don't add up: %+v", m)
	}

	if !o.Emulate {
		return
	}
	// Acknowledgements held: the retiring region is not reused; Load waits
	// retireWait, then allocates, and counts it.
	em := k.be.(*emulator)
	em.holdAcks.Store(true)
	p, g2 := load(swaps + 1)
	slot(swaps+1, p, g2)
	k.Unload(old)
	before := k.Memory()
	p2, g3 := load(swaps + 2)
	after := k.Memory()
	if after.Allocations != before.Allocations+1 || after.Unacknowledged != before.Unacknowledged+1 || after.Reused != before.Reused {
		t.Errorf("with the acknowledgement held: %+v then %+v; want one region more, no reuse", before, after)
	}
	slot(swaps+2, p2, g3)
	em.holdAcks.Store(false)
	k.Unload(p)
	p3, g4 := load(swaps + 3)
	if m := k.Memory(); m.Reused != after.Reused+1 {
		t.Errorf("acknowledged again: %+v; want the retired region reused", m)
	}
	slot(swaps+3, p3, g4)
}
