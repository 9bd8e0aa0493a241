package pipelines

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/warpflow/warpflow/internal/allocs"
	"github.com/warpflow/warpflow/rings"
)

func TestCountBuildErrors(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{`{by: [protocol, port]}`, `by: unknown key "port"`},
		{`{by: [vlan, vlan]}`, "by: vlan listed twice"},
		{`{by: protocol}`, "by: want a list"},
		{`{by: [[vlan]]}`, "by: unknown key"},
		{`{per: [vlan]}`, `unknown option "per"`},
	} {
		t.Run(tc.want, func(t *testing.T) { stWantBuildError(t, countKind, tc.yaml, tc.want) })
	}
	for _, src := range []string{`{}`, `{by: []}`, `{by: }`, `{by: [class, vlan, protocol]}`} {
		tpl := stMustBuild(t, countKind, src)
		if e := tpl.Edges(); len(e) != 1 || e[0].Stage != "next" {
			t.Fatalf("%s: edges %v", src, e)
		}
	}
}

// countBatch returns a batch of packets of the given lengths whose Meta is
// set directly (no packet bytes needed: count reads only Meta and lengths).
func countBatch(t *testing.T, metas []rings.Meta, lens []int) *rings.Batch {
	t.Helper()
	pkts := make([][]byte, len(lens))
	for i, n := range lens {
		pkts[i] = make([]byte, n)
	}
	b := stFillBatch(t, stArena(t), pkts)
	copy(b.Meta, metas)
	return b
}

func TestCountCounters(t *testing.T) {
	v4 := rings.FlagIPv4 | rings.FlagL4
	metas := []rings.Meta{
		{Flags: v4, IPProto: 6, Class: rings.ClassOK},                                                      // tcp untagged
		{Flags: v4, IPProto: 6, Class: rings.ClassOK, NumVLANs: 1, VLANs: [2]uint16{10}},                   // tcp vlan 10
		{Flags: rings.FlagIPv6, IPProto: 17, Class: rings.ClassOK, NumVLANs: 2, VLANs: [2]uint16{4095, 7}}, // udp vlan 4095
		{Flags: v4, IPProto: 200, Class: rings.ClassTruncated, NumVLANs: 1, VLANs: [2]uint16{10}},          // proto 200
		{Flags: rings.FlagARP, Class: rings.ClassOK},                                                       // not IP
		{Class: rings.ClassUnknownL3, NumVLANs: 1},                                                         // vlan 0, not IP
		{Flags: v4, IPProto: 0, Class: rings.ClassBadHeaderLen},                                            // proto 0
	}
	lens := []int{60, 64, 100, 70, 42, 50, 80}
	for _, tc := range []struct {
		by   string
		want []Counter
	}{
		{`{}`, []Counter{{"total", 7, 466}}},
		// Named protocols first, then none, then the numbers.
		{`{by: [protocol]}`, []Counter{{"total", 7, 466}, {"proto=tcp", 2, 124}, {"proto=udp", 1, 100}, {"proto=none", 2, 92},
			{"proto=0", 1, 80}, {"proto=200", 1, 70}}},
		{`{by: [vlan]}`, []Counter{{"total", 7, 466}, {"vlan=0", 1, 50}, {"vlan=10", 2, 134}, {"vlan=4095", 1, 100},
			{"vlan=none", 3, 182}}},
		{`{by: [class]}`, []Counter{{"total", 7, 466}, {"class=ok", 4, 266}, {"class=truncated", 1, 70},
			{"class=bad_header_len", 1, 80}, {"class=unknown_l3", 1, 50}}},
		// The order of by does not change the report's order.
		{`{by: [class, protocol, vlan]}`, []Counter{{"total", 7, 466},
			{"proto=tcp", 2, 124}, {"proto=udp", 1, 100}, {"proto=none", 2, 92}, {"proto=0", 1, 80}, {"proto=200", 1, 70},
			{"vlan=0", 1, 50}, {"vlan=10", 2, 134}, {"vlan=4095", 1, 100}, {"vlan=none", 3, 182},
			{"class=ok", 4, 266}, {"class=truncated", 1, 70}, {"class=bad_header_len", 1, 80}, {"class=unknown_l3", 1, 50}}},
	} {
		t.Run(tc.by, func(t *testing.T) {
			st := stMustBuild(t, countKind, tc.by).NewInstance()
			b := countBatch(t, metas, lens)
			if edges := stRunAll(st, b); fmt.Sprint(edges) != "[0 0 0 0 0 0 0]" {
				t.Fatalf("edges %v", edges)
			}
			got := stReport(st)
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("report\n got %v\nwant %v", got, tc.want)
			}
			// Counting twice doubles every counter; Report adds into dst.
			stRunAll(st, b)
			got = stReport(st)
			if len(got) != len(tc.want) {
				t.Fatalf("second report: %v", got)
			}
			for i, c := range got {
				w := tc.want[i]
				if c.Key != w.Key || c.Packets != 2*w.Packets || c.Bytes != 2*w.Bytes {
					t.Fatalf("after two runs: %v, want twice %v", c, w)
				}
			}
		})
	}
	// A fresh instance reports nothing.
	if got := stReport(stMustBuild(t, countKind, `{by: [vlan]}`).NewInstance()); len(got) != 0 {
		t.Fatalf("fresh instance reports %v", got)
	}
}

// TestCountSubset counts only the packets whose indices it is given.
func TestCountSubset(t *testing.T) {
	st := stMustBuild(t, countKind, `{by: [protocol]}`).NewInstance()
	b := countBatch(t, []rings.Meta{{Flags: rings.FlagIPv4, IPProto: 6}, {Flags: rings.FlagIPv4, IPProto: 17}, {Flags: rings.FlagIPv4, IPProto: 17}}, []int{60, 61, 62})
	next := make([]Edge, 2)
	st.Process(b, []uint16{2, 0}, next)
	want := []Counter{{"total", 2, 122}, {"proto=tcp", 1, 60}, {"proto=udp", 1, 62}}
	if got := stReport(st); !reflect.DeepEqual(got, want) {
		t.Fatalf("report %v, want %v", got, want)
	}
}

// TestCountProtocolRuns checks the by: [protocol] loop, which adds up runs
// of one protocol, against the general loop (by: [protocol, vlan]) on random
// subsets of packets with runs of every length.
func TestCountProtocolRuns(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	protos := []uint8{6, 17, 17, 17, 1, 0, 255}
	for range 50 {
		metas := make([]rings.Meta, 1+r.IntN(200))
		lens := make([]int, len(metas))
		for i := range metas {
			if i == 0 || r.IntN(4) == 0 {
				metas[i] = rings.Meta{Flags: rings.FlagIPv4, IPProto: protos[r.IntN(len(protos))]}
				if r.IntN(5) == 0 {
					metas[i].Flags = rings.FlagARP
				}
			} else {
				metas[i] = metas[i-1]
			}
			lens[i] = 14 + r.IntN(200)
		}
		b := countBatch(t, metas, lens)
		var idx []uint16
		for i := range metas {
			if r.IntN(8) != 0 {
				idx = append(idx, uint16(i))
			}
		}
		var reps [2][]Counter
		for v, cfg := range []string{`{by: [protocol]}`, `{by: [protocol, vlan]}`} {
			st := stMustBuild(t, countKind, cfg).NewInstance()
			next := make([]Edge, len(idx))
			for k := range next {
				next[k] = 9
			}
			st.Process(b, idx, next)
			st.Process(b, idx, next)
			for k, e := range next {
				if e != 0 {
					t.Fatalf("%s: edge %d of packet %d", cfg, e, idx[k])
				}
			}
			for _, c := range stReport(st) {
				if !strings.HasPrefix(c.Key, "vlan=") {
					reps[v] = append(reps[v], c)
				}
			}
		}
		if !reflect.DeepEqual(reps[0], reps[1]) {
			t.Fatalf("by protocol %v\ngeneral     %v", reps[0], reps[1])
		}
	}
}

func TestCountZeroAlloc(t *testing.T) {
	for _, cfg := range []string{`{by: [protocol, vlan, class]}`, `{by: [protocol]}`} {
		st := stMustBuild(t, countKind, cfg).NewInstance()
		b := stFillBatch(t, stArena(t), stBenchPackets(t, 64))
		idx, next := stDense(b.Len())
		if n := allocs.Count(100, func() { st.Process(b, idx, next) }); n != 0 {
			t.Fatalf("%s: Process allocated %d times in 100 batches, want 0", cfg, n)
		}
	}
}

func BenchmarkCount(b *testing.B) {
	for _, by := range []string{"protocol", "protocol, vlan, class"} {
		b.Run("by="+by, func(b *testing.B) { benchCount(b, "{by: ["+by+"]}") })
	}
}

func benchCount(b *testing.B, cfg string) {
	st := stMustBuild(b, countKind, cfg).NewInstance()
	const n = 64
	batch := stFillBatch(b, stArena(b), stBenchPackets(b, n))
	idx, next := stDense(n)
	b.ReportAllocs()
	for b.Loop() {
		st.Process(batch, idx, next)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/pkt")
}
