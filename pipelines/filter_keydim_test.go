package pipelines

import (
	"math/rand/v2"
	"testing"

	"github.com/warpflow/warpflow/rings"
)

// TestFilterPreKeyAgrees checks that preKey writes exactly filterKey's
// values for the dimensions asked for, and nothing else, over random
// packets (odd flag combinations included) and every subset of the gate
// dimensions that matters to its branches.
func TestFilterPreKeyAgrees(t *testing.T) {
	rnd := rand.New(rand.NewPCG(4, 4))
	var all uint16
	for _, d := range gateDims {
		all |= 1 << d
	}
	needs := []uint16{all, 1 << dSrcHi, 1 << dDstHi, 1 << dClass, 1<<dSport | 1<<dVLAN, 1 << dL3, 1 << dTCP, 1 << dFrag}
	for i := range 20000 {
		m := genMeta(rnd)
		if i%3 == 0 {
			m.Flags = rings.Flags(rnd.IntN(1 << 10)) // both families, ARP with IP, ...
		}
		var want [nDims]uint64
		filterKey(&m, &want)
		for _, need := range needs {
			const sentinel = 0xdeadbeef
			var got [nDims]uint64
			for d := range got {
				got[d] = sentinel
			}
			preKey(&m, need, &got)
			for d := range nDims {
				switch {
				case need&(1<<d) != 0 && got[d] != want[d]:
					t.Fatalf("meta %+v need %#x: dim %d = %#x, filterKey %#x", m, need, d, got[d], want[d])
				case need&(1<<d) == 0 && got[d] != sentinel && got[d] != want[d]:
					t.Fatalf("meta %+v need %#x: dim %d not asked for but set to %#x", m, need, d, got[d])
				}
			}
		}
	}
}

// TestFilterProcessAgreesWithLookup runs the stage's batch path (pre-gate
// misses counted in registers) against per-packet lookups: same edges, same
// per-rule counters, on rule sets with and without pre-gates and traffic
// that mostly misses or mostly hits.
func TestFilterProcessAgreesWithLookup(t *testing.T) {
	rnd := rand.New(rand.NewPCG(6, 1))
	sets := [][]filterRule{benchShapedRules(1000), realisticRules(rnd, 1000)}
	for range 20 {
		rules := make([]filterRule, 1+rnd.IntN(60))
		for i := range rules {
			rules[i] = genRule(rnd)
		}
		sets = append(sets, rules)
	}
	a, err := rings.NewArena(rings.ArenaOptions{Frames: 64, FrameSize: 2048})
	if err != nil {
		t.Fatal(err)
	}
	pregated := 0
	for si, rules := range sets {
		tpl, bad := newFilterTemplate(rules, Target{Drop: "dflt"}, Target{Stage: "next"})
		if bad != nil {
			t.Fatal(bad)
		}
		if len(tpl.cls.pre) > 0 {
			pregated++
		}
		st := tpl.NewInstance().(*filterStage)
		var metas []rings.Meta
		switch si % 3 {
		case 0:
			metas = missMetas(64)
		case 1:
			metas = realisticMetas(rnd, rules, 64)
		}
		for len(metas) < 64 {
			metas = append(metas, genMeta(rnd))
		}
		b := rings.NewBatch(64, a)
		b.SetLen(64)
		copy(b.Meta, metas)
		idx := make([]uint16, 64)
		for i := range idx {
			idx[i] = uint16(i)
			b.Descs[i].Len = uint32(60 + i)
		}
		next := make([]Edge, 64)
		wantPkts := make([]uint64, len(rules)+1)
		wantBytes := make([]uint64, len(rules)+1)
		for pass := range 2 {
			st.Process(b, idx, next)
			for k := range idx {
				r := tpl.cls.lookup(&b.Meta[k])
				if pass == 0 {
					wantPkts[r]++
					wantBytes[r] += uint64(b.Descs[k].Len)
				}
				if want := tpl.ruleEdge[r]; next[k] != want {
					t.Fatalf("set %d packet %d: edge %d, lookup says rule %d (edge %d)", si, k, next[k], r, want)
				}
			}
		}
		for r := range wantPkts {
			if st.pkts[r] != 2*wantPkts[r] || st.bytes[r] != 2*wantBytes[r] {
				t.Fatalf("set %d rule %d: %d packets %d bytes, want %d and %d", si, r, st.pkts[r], st.bytes[r], 2*wantPkts[r], 2*wantBytes[r])
			}
		}
	}
	if pregated < 2 {
		t.Fatalf("only %d rule sets with pre-gates: the test no longer exercises the batch path", pregated)
	}
}

// TestFilterPreHitsAgrees checks the vector-wide pre-gate pass against
// prePass on each packet's full key, on rule sets whose pre-gates cover
// every dimension loop (addresses, ports, class and the generic one).
func TestFilterPreHitsAgrees(t *testing.T) {
	rnd := rand.New(rand.NewPCG(8, 3))
	dims := map[uint8]int{}
	sets := [][]filterRule{benchShapedRules(1000), realisticRules(rnd, 1000)}
	// Rules on source ports alone, so the source-port loop has a pre-gate.
	var bySport []filterRule
	for i := range 60 {
		bySport = append(bySport, filterRule{srcPort: []portRange{{lo: uint16(1000 + 7*i), hi: uint16(1000 + 7*i + i%3)}}})
	}
	sets = append(sets, bySport)
	// Rules on conntrack state, as a stateful pipeline's filter has them
	// (ct: invalid, ct: new with a port): the ct loop gets a pre-gate.
	sets = append(sets, []filterRule{
		{ctStates: 1 << rings.CTInvalid, action: Target{Drop: "invalid"}},
		{ctStates: 1 << rings.CTNew, proto: []uint16{6}, dstPort: []portRange{{lo: 23, hi: 23}}},
	})
	var byCT []filterRule
	for i := range 40 {
		byCT = append(byCT, filterRule{ctStates: uint8(1 + rnd.IntN(31)), ctDirs: uint8(1 + rnd.IntN(2)), dstPort: []portRange{{lo: uint16(2000 + 5*i), hi: uint16(2000 + 5*i)}}})
	}
	sets = append(sets, byCT)
	// Rules on one direction alone: the ct gate must read the reply bit.
	sets = append(sets, []filterRule{{ctStates: 1<<rings.CTNew | 1<<rings.CTEstablished, ctDirs: 1}, {ctStates: 1 << rings.CTInvalid, ctDirs: 2}})
	for range 150 {
		force := 1 + rnd.IntN(127)
		rules := make([]filterRule, 40+rnd.IntN(100))
		for i := range rules {
			r := genRule(rnd)
			if force&1 != 0 && r.src == nil {
				r.src = genPrefixes(rnd)
			}
			if force&2 != 0 && r.dst == nil {
				r.dst = genPrefixes(rnd)
			}
			if force&4 != 0 && r.dstPort == nil {
				r.dstPort = genRanges(rnd, genPorts)
			}
			if force&8 != 0 && !r.hasVLAN {
				r.hasVLAN, r.vlan = true, genRanges(rnd, genVLANs)
			}
			if force&16 != 0 && r.proto == nil {
				r.proto = []uint16{genProtos[rnd.IntN(len(genProtos))]}
			}
			if force&64 != 0 && r.srcPort == nil {
				r.srcPort = genRanges(rnd, genPorts)
			}
			rules[i] = r
		}
		sets = append(sets, rules)
	}
	meta := make([]rings.Meta, 200)
	idx := make([]uint16, 0, 200)
	hit := make([]uint64, 200)
	for _, rules := range sets {
		c := buildClassifier(rules)
		for _, g := range c.pre {
			dims[g.dim]++
		}
		for i := range meta {
			meta[i] = genMeta(rnd)
			if i%3 == 0 {
				meta[i] = missMetas(1)[0]
			}
			meta[i].CT = uint8(rnd.IntN(5)) | uint8(rnd.IntN(2))*rings.CTReply
		}
		idx = idx[:0]
		for i := range meta {
			if i%4 != 1 { // a vector that skips some packets
				idx = append(idx, uint16(len(meta)-1-i))
			}
		}
		c.preHits(meta, idx, hit)
		for k, i := range idx {
			var key [nDims]uint64
			filterKey(&meta[i], &key)
			if want := c.prePass(&key); (hit[k]&1 != 0) != want {
				t.Fatalf("packet %d (%+v): preHits %v, prePass %v", i, meta[i], hit[k]&1 != 0, want)
			}
		}
	}
	for _, d := range []uint8{dSrcHi, dDstHi, dSport, dDport, dClass, dCT} {
		if dims[d] == 0 {
			t.Errorf("no pre-gate on dimension %d: its loop is not exercised", d)
		}
	}
	if len(dims) < 4 {
		t.Errorf("pre-gate dimensions %v: the generic loop is not exercised", dims)
	}
}

// TestFilterProcessCTAgrees holds processCT, Process for rule sets whose
// only pre-gate tests the ct state (the stateful pipelines'), and Process
// for sets with a ct pre-gate beside others, to lookup packet by packet:
// edges and every rule's packet and byte counters, over random metadata
// (any CT byte) and random vectors (a random subset of the batch in random
// order, so that a vector position is not its packet).
func TestFilterProcessCTAgrees(t *testing.T) {
	rnd := rand.New(rand.NewPCG(16, 3))
	a, err := rings.NewArena(rings.ArenaOptions{Frames: 64, FrameSize: 2048})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		src    string
		ctOnly bool
	}{
		{`{default: "drop:other", rules: [{ct: invalid, action: "drop:invalid"}, {ct: new, proto: tcp, dst_port: 23, action: "drop:telnet"}]}`, true},
		{`{rules: [{ct: new, action: "drop:new"}]}`, true},
		{`{rules: [{ct: [established, related], ct_dir: reply, action: "drop:x"}, {ct: new, ct_dir: original, dst_port: 80, action: "drop:y"}]}`, true},
		{`{rules: [{ct: [new, invalid, untracked], src: 10.0.0.0/8, action: "drop:x"}, {ct: related, action: "drop:y"}]}`, true},
		{`{rules: [{ct: new, action: "drop:x"}, {dst_port: 53, proto: udp, action: "drop:y"}]}`, false},
		{`{rules: [{ct: invalid, action: "drop:x"}, {class: truncated, action: "drop:y"}]}`, false},
	} {
		tpl := stMustBuild(t, filterKind, c.src).(*filterTemplate)
		if tpl.cls.preCTOnly != c.ctOnly {
			t.Fatalf("%s: preCTOnly %v, want %v: the test no longer exercises what it meant to", c.src, tpl.cls.preCTOnly, c.ctOnly)
		}
		st := tpl.NewInstance().(*filterStage)
		n := len(tpl.ruleEdge)
		wantPkts, wantBytes := make([]uint64, n), make([]uint64, n)
		b := rings.NewBatch(64, a)
		b.SetLen(64)
		next := make([]Edge, 65) // one more, to see nothing written past the vector
		passed := 0
		for range 300 {
			for i := range b.Meta {
				b.Meta[i] = genMeta(rnd)
				b.Meta[i].CT = uint8(rnd.IntN(256))
				b.Descs[i].Len = uint32(60 + rnd.IntN(1500))
			}
			idx := make([]uint16, rnd.IntN(65))
			for k, i := range rnd.Perm(64)[:len(idx)] {
				idx[k] = uint16(i)
			}
			for k := range next {
				next[k] = 0xee
			}
			st.Process(b, idx, next)
			for k, i := range idx {
				m := &b.Meta[i]
				r := tpl.cls.lookup(m)
				wantPkts[r]++
				wantBytes[r] += uint64(b.Descs[i].Len)
				if tpl.cls.prePassMeta(m) {
					passed++
				}
				if want := tpl.ruleEdge[r]; next[k] != want {
					t.Fatalf("%s: packet %d: edge %d, lookup says rule %d (edge %d)", c.src, i, next[k], r, want)
				}
			}
			if next[len(idx)] != 0xee {
				t.Fatalf("%s: edge written past the vector", c.src)
			}
		}
		for r := range wantPkts {
			if st.pkts[r] != wantPkts[r] || st.bytes[r] != wantBytes[r] {
				t.Fatalf("%s: rule %d: %d packets %d bytes, want %d and %d", c.src, r, st.pkts[r], st.bytes[r], wantPkts[r], wantBytes[r])
			}
		}
		if passed < 500 {
			t.Fatalf("%s: only %d packets passed the pre-gates", c.src, passed)
		}
	}
}
