package dataplane

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/warpflow/warpflow/internal/meminfo"
	"github.com/warpflow/warpflow/pipelines"
)

// setRoom makes CheckTableMemory see room bytes, for the test's length.
func setRoom(t *testing.T, room uint64) {
	t.Helper()
	old := memRoom
	memRoom = func() (meminfo.Room, bool) { return meminfo.Room{Bytes: room, Source: "test"}, true }
	t.Cleanup(func() { memRoom = old })
}

func ctGraph(t *testing.T, name string, size, workers int, rule string) *pipelines.Graph {
	t.Helper()
	g, err := pipelines.Load(name+".yaml", fmt.Appendf(nil, `name: %s
settings: {workers: %d}
stages:
  - {name: parse, type: parse}
  - {name: ct, type: conntrack, size: %d}
  - name: acl
    type: filter
    rules: [{ct: invalid, action: "drop:invalid"}, {proto: tcp, dst_port: %s, action: "drop:blocked"}]
  - {name: out, type: tx, port: out}
`, name, workers, size, rule))
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestTableMemoryRefused: an engine whose workers' tables would not fit
// the memory the process can take is refused, with the figures and the
// fix, before any table is allocated; a swap is checked the same way,
// except for the tables it hands over whole, and a refused swap leaves
// the engine as it was.
func TestTableMemoryRefused(t *testing.T) {
	const size = 1 << 20 // 124.7 bytes a flow: ~125 MiB a worker
	big := ctGraph(t, "big", size, 2, "23")
	per := big.TableBytes()
	if per < size*120 || per > size*128 {
		t.Fatalf("TableBytes %d for %d flows: want 120 - 128 bytes a flow", per, size)
	}
	outs := func() Outputs { return Outputs{Ports: map[string]Port{"out": NewNullPort("out")}} }

	// Room for one worker's table, not two: refused, with the figures.
	setRoom(t, per+per/4)
	arena, rp := loopingReplay(t)
	_, err := NewEngine(big, arena, rp, outs(), DefaultOptions())
	if err == nil {
		t.Fatal("an engine of 2 workers' tables in room for 1 was built")
	}
	for _, want := range []string{`pipeline "big"`, byteSize(2 * per), "2 workers", "test", "conntrack's size"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}

	// Room for two: built. TableBytes says what it checked.
	setRoom(t, 3*per)
	e, err := NewEngine(big, arena, rp, outs(), DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	if got, n := e.TableBytes(); got != 2*per || n != 2 {
		t.Fatalf("engine TableBytes %d for %d runners, want %d for 2", got, n, 2*per)
	}

	// Less room now (the tables are allocated): a swap that only
	// changes a rule keeps the tables whole and needs nothing new.
	setRoom(t, per/2)
	other := ctGraph(t, "other", size, 2, "24")
	ps, err := e.PrepareSwap(other, outs(), SwapOptions{Timeout: time.Second})
	if err != nil {
		t.Fatalf("a rule change refused for memory it does not need: %v", err)
	}
	if b, _ := ps.TableBytes(); b != 0 {
		t.Fatalf("a swap keeping both tables needs %d bytes of new tables", b)
	}
	ps.Abort()

	// A swap to another size makes new tables (the flows copied over):
	// refused, and the engine keeps its plan.
	resized := ctGraph(t, "resized", 2*size, 2, "23")
	if _, err := e.Swap(resized, outs(), time.Second); err == nil || !strings.Contains(err.Error(), `pipeline "resized"`) {
		t.Fatalf("a swap to tables twice the size in half a table's room: %v", err)
	}
	// So does one that changes the worker count (each worker's table is
	// rebuilt from the old ones).
	if _, err := e.Swap(ctGraph(t, "three", size, 3, "23"), outs(), time.Second); err == nil {
		t.Fatal("a swap to 3 workers' new tables in half a table's room was accepted")
	}
	if _, got := e.Generation(); got != "big" {
		t.Fatalf("after refused swaps the engine runs %q", got)
	}
	// With room, the resize goes through.
	setRoom(t, 8*per)
	if _, err := e.Swap(resized, outs(), time.Second); err != nil {
		t.Fatal(err)
	}
}

// TestTableMemoryUnknown: where the room cannot be read nothing is
// refused.
func TestTableMemoryUnknown(t *testing.T) {
	old := memRoom
	memRoom = func() (meminfo.Room, bool) { return meminfo.Room{}, false }
	t.Cleanup(func() { memRoom = old })
	if err := CheckTableMemory("p", 1<<50, 1); err != nil {
		t.Fatal(err)
	}
}
