package bench

import (
	"strings"
	"testing"

	"github.com/warpflow/warpflow/pipelines"
	"github.com/warpflow/warpflow/rings"
)

// TestStatefulRow runs the stateful row small: every generated packet is
// transmitted (no flow lost, none refused), the steady phase allocates a
// handful at most, the table holds every flow in at most 128 bytes each;
// and the baseline row runs over the same generator.
func TestStatefulRow(t *testing.T) {
	const flows, steady = 20_000, 400_000
	r, err := statefulRow(statefulPipeline, flows, steady)
	if err != nil {
		t.Fatal(err)
	}
	if r.Flows != flows || r.TableBytesPerFlow <= 0 || r.TableBytesPerFlow > 128 || r.Packets != steady {
		t.Fatalf("row %+v", r)
	}
	if r.Allocs > 16 {
		t.Fatalf("%d allocations in the steady phase of %d packets", r.Allocs, steady)
	}
	b, err := statefulRow(statefulBasePipeline(), flows, steady)
	if err != nil || b.Packets != steady {
		t.Fatalf("baseline row %+v %v", b, err)
	}
}

// TestFlowPacketsParse: the generator's packets are what the parse stage
// and conntrack take as well-formed TCP and UDP with valid checksums.
func TestFlowPacketsParse(t *testing.T) {
	g, err := pipelines.Load("p.yaml", []byte(strings.Replace(statefulPipeline, "size: 1048576", "size: 1024", 1)))
	if err != nil {
		t.Fatal(err)
	}
	a, err := rings.NewArena(rings.ArenaOptions{Frames: 64, FrameSize: 2048, Headroom: 256})
	if err != nil {
		t.Fatal(err)
	}
	r := g.NewRunner(pipelines.RunnerOptions{})
	b := rings.NewBatch(8, a)
	for f := uint64(0); f < 4; f++ {
		for kind := uint64(0); kind < 5; kind++ {
			b.Clear()
			addr, _ := a.Alloc()
			n := writeFlowPacket(a.Frame(addr)[int(addr)&2047:], f, kind)
			b.Append(rings.Desc{Addr: addr, Len: uint32(n)}, 0, 0)
			r.Process(b)
			m := b.Meta[0]
			if m.Class != rings.ClassOK || m.Flags&rings.FlagL4 == 0 || m.CT&rings.CTStateMask == rings.CTInvalid || m.Verdict != rings.VerdictTX {
				t.Fatalf("flow %d kind %d: class %v flags %x ct %d", f, kind, m.Class, m.Flags, m.CT)
			}
			a.Free(addr)
		}
	}
}
