package pipelines

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"unsafe"
)

func mustLoad(t *testing.T, yaml string) *Graph {
	t.Helper()
	g, err := Load("m.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func stageTemplate(g *Graph, name string) Template {
	for i := range g.nodes {
		if g.nodes[i].name == name {
			return g.nodes[i].tmpl
		}
	}
	return nil
}

// TestTableBytes: what a template says one instance allocates is what
// the instance allocates (conntrack: the table's own count; reassemble:
// the arrays setup makes), and a graph's sum is its stages'.
func TestTableBytes(t *testing.T) {
	g := mustLoad(t, `name: m
stages:
  - {name: parse, type: parse}
  - {name: ra, type: reassemble, mode: full, max_datagrams: 100, max_fragments: 10, max_bytes: 1000}
  - {name: ct, type: conntrack, size: 5000}
  - {name: out, type: tx, port: out}
`)
	ct := stageTemplate(g, "ct").(*conntrackTemplate)
	if got, want := ct.TableBytes(), newCTTable(5000).bytes(); got != uint64(want) {
		t.Fatalf("conntrack TableBytes %d, the table holds %d", got, want)
	}
	ra := stageTemplate(g, "ra").(*reassembleTemplate)
	st := ra.NewInstance().(*raStage)
	st.setup()
	held := uint64(cap(st.recs))*uint64(unsafe.Sizeof(raRec{})) + uint64(cap(st.ranges))*4 + uint64(cap(st.buf)) + uint64(cap(st.idx))*8 + uint64(cap(st.free))*4
	if got := ra.TableBytes(); got != held {
		t.Fatalf("reassemble TableBytes %d, setup made %d", got, held)
	}
	if g.TableBytes() != ct.TableBytes()+ra.TableBytes() {
		t.Fatalf("graph %d, stages %d + %d", g.TableBytes(), ct.TableBytes(), ra.TableBytes())
	}
	if n := mustLoad(t, "name: n\nstages:\n  - {name: parse, type: parse}\n  - {name: out, type: tx, port: out}\n").TableBytes(); n != 0 {
		t.Fatalf("a stateless graph's tables: %d bytes", n)
	}
}

// TestNewTableBytes: a swap's new tables are all of the new graph's
// but the conntrack tables it hands over whole (same name, kind and
// size); reassembly always starts afresh.
func TestNewTableBytes(t *testing.T) {
	graph := func(ctName string, size int, rule string) *Graph {
		return mustLoad(t, fmt.Sprintf(`name: g
stages:
  - {name: parse, type: parse}
  - {name: ra, type: reassemble}
  - {name: %s, type: conntrack, size: %d}
  - name: acl
    type: filter
    rules: [{proto: tcp, dst_port: %s, action: "drop:x"}]
  - {name: out, type: tx, port: out}
`, ctName, size, rule))
	}
	old := graph("ct", 4096, "23")
	ra := stageTemplate(old, "ra").(*reassembleTemplate).TableBytes()
	ct := stageTemplate(old, "ct").(*conntrackTemplate).TableBytes()
	for _, c := range []struct {
		name string
		g    *Graph
		want uint64
	}{
		{"a rule changed", graph("ct", 4096, "24"), ra},
		{"another size", graph("ct", 8192, "23"), ra + stageTemplate(graph("ct", 8192, "23"), "ct").(*conntrackTemplate).TableBytes()},
		{"renamed", graph("flows", 4096, "23"), ra + ct},
	} {
		if got := c.g.NewTableBytes(old); got != c.want {
			t.Errorf("%s: %d new bytes, want %d", c.name, got, c.want)
		}
	}
	if got := old.NewTableBytes(nil); got != old.TableBytes() {
		t.Errorf("no graph before: %d, want all %d", got, old.TableBytes())
	}
	// A stage of the same name that is not conntrack hands nothing over.
	counted := mustLoad(t, "name: c\nstages:\n  - {name: parse, type: parse}\n  - {name: ct, type: count}\n  - {name: out, type: tx, port: out}\n")
	if got := old.NewTableBytes(counted); got != old.TableBytes() {
		t.Errorf("from a count stage named ct: %d, want all %d", got, old.TableBytes())
	}
}

// TestCTTableLazy: a new table hands out never-used entries in order
// once nothing freed is waiting, takes freed ones first, is full at its
// size, and does not write its memory when made: a table of 16M flows
// (2 GB) adds far less than that to the process's resident memory.
func TestCTTableLazy(t *testing.T) {
	tab := newCTTable(4)
	for want := uint32(0); want < 4; want++ {
		if e, ok := tab.alloc(); !ok || e != want {
			t.Fatalf("alloc %d: %d %v", want, e, ok)
		}
	}
	if _, ok := tab.alloc(); ok {
		t.Fatal("a full table gave a fifth entry")
	}
	tab.release(2)
	tab.release(0)
	if e, ok := tab.alloc(); !ok || e != 0 {
		t.Fatalf("after freeing 2 then 0: %d %v, want 0", e, ok)
	}
	if e, ok := tab.alloc(); !ok || e != 2 {
		t.Fatalf("then: %d %v, want 2", e, ok)
	}
	if _, ok := tab.alloc(); ok {
		t.Fatal("full again, yet an entry")
	}

	rss := func() uint64 {
		b, err := os.ReadFile("/proc/self/status")
		if err != nil {
			t.Skip("no /proc/self/status") // not Linux
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
				n, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				return n << 10
			}
		}
		t.Fatal("no VmRSS")
		return 0
	}
	before := rss()
	big := newCTTable(16 << 20)
	// Signed: the resident set can shrink meanwhile (the runtime hands
	// memory back), which is no growth.
	grew := int64(rss()) - int64(before)
	if full := int64(big.bytes()); grew > full/8 {
		t.Fatalf("making a table of %d bytes grew the resident memory by %d", full, grew)
	}
	// Still a working table.
	if e, ok := big.alloc(); !ok || e != 0 {
		t.Fatalf("the big table's first entry: %d %v", e, ok)
	}
}
