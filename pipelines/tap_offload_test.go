package pipelines

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/warpflow/warpflow/rings"
)

// TestTapSeesKernel holds Tap.SeesKernel to what a tap actually takes:
// for every tap point of each pipeline (every stage, and every edge of
// every stage), run tapBatch's packets (UDP to port 9 and 53) through the
// workers with the tap on and ask the plan's kernel lookup, for each
// packet the tap took, whether the XDP program would have decided it.
// SeesKernel must be true exactly where the tap took such a packet, under
// offload auto, and false everywhere under offload none.
func TestTapSeesKernel(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		seen       int // how many tap points see kernel frames, as a check on the table
	}{
		// Port 9 is dropped in the kernel.
		{"drop", "name: d\nstages:\n  - {name: parse, type: parse}\n" +
			"  - {name: acl, type: filter, default: cnt, rules: [{proto: udp, dst_port: 9, action: \"drop:nine\"}]}\n" +
			"  - {name: cnt, type: count}\n  - {name: out, type: tx, port: p}\n", 5},
		// A pass rule (to a pass stage) moves too.
		{"pass", "name: p\nstages:\n  - {name: parse, type: parse}\n" +
			"  - {name: acl, type: filter, default: out, rules: [{proto: udp, dst_port: 9, action: host}]}\n" +
			"  - {name: host, type: pass}\n  - {name: out, type: tx, port: p}\n", 5},
		// Only rules the kernel never fires (class): nothing hidden.
		{"idle", "name: i\nstages:\n  - {name: parse, type: parse}\n" +
			"  - {name: acl, type: filter, default: out, rules: [{class: malformed, action: \"drop:bad\"}, {proto: udp, dst_port: 9, action: out}]}\n" +
			"  - {name: out, type: tx, port: p}\n", 0},
		// The first rule cannot move (it transmits): no split.
		{"none moved", "name: n\nstages:\n  - {name: parse, type: parse}\n" +
			"  - {name: acl, type: filter, default: out, rules: [{proto: udp, dst_port: 53, action: out}, {proto: udp, dst_port: 9, action: \"drop:nine\"}]}\n" +
			"  - {name: out, type: tx, port: p}\n", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := Load(tc.name+".yaml", []byte(tc.yaml))
			if err != nil {
				t.Fatal(err)
			}
			plan := g.Offload(OffloadAuto)
			a, _ := rings.NewArena(rings.ArenaOptions{Frames: 64, FrameSize: 2048, Headroom: 256})
			b := tapBatch(t, a, 32)
			// What the kernel would decide, by packet index (byte 42):
			// the plan's own lookup on the workers' parse of it.
			r := g.NewRunner(RunnerOptions{})
			r.Process(b)
			decides := map[uint32]bool{}
			for i := range b.Len() {
				if plan.Moved > 0 && plan.Kernel.KernelLookup(&b.Meta[i]) >= 0 {
					decides[binary.BigEndian.Uint32(b.Packet(i)[42:])] = true
				}
			}
			seen := 0
			for _, st := range g.Stages() {
				points := []string{""}
				if !st.Terminal {
					points = append(points, st.Edges...)
				}
				for _, edge := range points {
					tap, err := g.NewTap(st.Name, edge, 1000, 64, 1<<16)
					if err != nil {
						t.Fatal(err)
					}
					r := g.NewRunner(RunnerOptions{})
					r.SetTap(tap)
					r.Process(b)
					want := false
					tap.Drain(func(_ time.Time, data []byte, _ int) {
						want = want || decides[binary.BigEndian.Uint32(data[42:])]
					})
					if got := tap.SeesKernel(OffloadAuto); got != want {
						t.Errorf("tap %s edge %q: SeesKernel %v, but the tap took kernel-decided packets: %v", st.Name, edge, got, want)
					}
					if tap.SeesKernel(OffloadNone) {
						t.Errorf("tap %s edge %q: SeesKernel under offload none", st.Name, edge)
					}
					if want {
						seen++
					}
				}
			}
			if seen != tc.seen {
				t.Errorf("%d tap points see kernel-decided packets, want %d", seen, tc.seen)
			}
		})
	}
}
