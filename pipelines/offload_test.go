package pipelines

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/warpflow/warpflow/rings"

	"github.com/warpflow/warpflow/internal/testwait"
)

// TestKernelRulesAgreeWithOracle builds the kernel's tables from random
// rule sets and checks the kernel lookup (its Go twin, KernelLookup)
// against the linear oracle on every class-OK IP packet it could decide:
// the kernel's rule is the oracle's first match, and no rule when none.
func TestKernelRulesAgreeWithOracle(t *testing.T) {
	rnd := rand.New(rand.NewPCG(7, 11))
	sets, checked, hits := 400, 0, 0
	for s := 0; s < sets; s++ {
		n := 1 + rnd.IntN(KernelMaxRules)
		rules := make([]filterRule, n)
		planned := make([]OffloadRule, n)
		for i := range rules {
			rules[i] = genRule(rnd)
			planned[i] = OffloadRule{Index: i, Kernel: true, Verdict: rings.VerdictDrop}
		}
		k := buildKernelRules(rules, planned)
		for range 300 {
			m := genMeta(rnd)
			fam := filterFamily(m.Flags)
			if fam != famV4 && fam != famV6 {
				continue
			}
			m.Class = rings.ClassOK  // the kernel decides class-OK frames only
			m.CT = rings.CTUntracked // before any stage: no conntrack ran
			want := oracleMatch(rules, &m)
			if want == len(rules) {
				want = -1
			} else {
				hits++
			}
			if got := k.KernelLookup(&m); got != want {
				t.Fatalf("set %d (%d rules): kernel rule %d, oracle %d\nrule: %+v\nmeta: %+v", s, n, got, want, rules[max(want, 0)], m)
			}
			checked++
		}
	}
	if checked < sets*100 || hits < checked/10 || hits > checked*9/10 {
		t.Fatalf("weak test: %d packets checked, %d matched a rule", checked, hits)
	}
}

const offloadYAML = `name: split-test
stages:
  - {name: parse, type: parse}
  - name: acl
    type: filter
    default: accept
    rules:
      - {class: malformed, action: "drop:malformed"}
      - {proto: udp, src: 10.9.0.0/16, dst_port: 9, action: "drop:flood"}
      - {proto: tcp, tcp_flags: "syn,!ack", vlan: [none, 10-20], action: "drop:syn"}
      - {proto: udp, dst_port: 53, action: tokernel}
      - {src: [2001:db8::/32, 192.0.2.0/24], fragment: true, action: "drop:frag"}
      - {proto: tcp, dst_port: 80, action: web}
      - {proto: udp, dst_port: 5353, action: "drop:mdns"}
  - {name: web, type: tx, port: web0}
  - {name: tokernel, type: pass}
`

func planYAML(t *testing.T, src string, mode OffloadMode) *OffloadPlan {
	t.Helper()
	_, p, err := LoadOffload("p.yaml", []byte(src), mode)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPlanOffloadPrefix: the prefix runs up to the first rule whose action
// the kernel cannot take (a tx), pass and drop rules move, and the plan
// and its explanation name the stopping rule and the reason.
func TestPlanOffloadPrefix(t *testing.T) {
	p := planYAML(t, offloadYAML, OffloadAuto)
	if p.Filter != "acl" || len(p.Rules) != 7 || p.Moved != 5 {
		t.Fatalf("plan: filter %q, %d rules, %d moved; want acl, 7, 5", p.Filter, len(p.Rules), p.Moved)
	}
	if !strings.Contains(p.StopReason, `transmits on port "web0"`) {
		t.Errorf("stop reason %q", p.StopReason)
	}
	wantV := []rings.Verdict{rings.VerdictDrop, rings.VerdictDrop, rings.VerdictDrop, rings.VerdictPass, rings.VerdictDrop}
	for i, r := range p.Rules {
		if r.Kernel != (i < 5) || i < 5 && r.Verdict != wantV[i] {
			t.Errorf("rule %d: kernel %v verdict %v", i, r.Kernel, r.Verdict)
		}
	}
	if p.Rules[1].Label != "flood" || p.Rules[1].Pos.Line != 9 {
		t.Errorf("rule 1: label %q line %d", p.Rules[1].Label, p.Rules[1].Pos.Line)
	}
	if len(p.Kernel.Actions) != 5 || p.Kernel.Actions[3] != KernelPass || p.Kernel.Actions[1] != KernelDrop {
		t.Errorf("kernel actions %v", p.Kernel.Actions)
	}
	// Rule 0 (class malformed) never fires in the kernel: no bit anywhere.
	for i, v := range p.Kernel.L3 {
		if v&1 != 0 {
			t.Fatalf("rule 0 has a bit in l3[%d]", i)
		}
	}
	for i, r := range p.Rules[:p.Moved] {
		if r.Idle != (i == 0) {
			t.Errorf("rule %d: idle %v", i, r.Idle)
		}
	}
	ex := p.Explain()
	for _, w := range []string{"rules 0-4 of 7 run in the kernel", "workers rule[5] (line 13): web", "stops the prefix: its action transmits", "kernel  rule[1] (line 9): drop:flood"} {
		if !strings.Contains(ex, w) {
			t.Errorf("explain lacks %q:\n%s", w, ex)
		}
	}

	none := planYAML(t, offloadYAML, OffloadNone)
	if none.Moved != 0 || len(none.Kernel.Actions) != 0 || !strings.Contains(none.Explain(), "offload: none") {
		t.Errorf("offload none: %d moved\n%s", none.Moved, none.Explain())
	}
}

func TestPlanOffloadStops(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		moved      int
		why        string
	}{
		{"accept stops", `name: x
stages:
  - {name: parse, type: parse}
  - name: f
    type: filter
    rules:
      - {proto: udp, action: "drop:u"}
      - {proto: tcp, action: accept}
      - {proto: icmp, action: "drop:i"}
  - {name: out, type: tx, port: o}
`, 1, `its action transmits on port "o"`},
		{"stage stops", `name: x
stages:
  - {name: parse, type: parse}
  - name: f
    type: filter
    rules:
      - {proto: tcp, action: c}
  - {name: c, type: count}
  - {name: out, type: tx, port: o}
`, 0, `its action c leads to stage "c", which runs on the workers`},
		{"no filter", `name: x
stages:
  - {name: parse, type: parse}
  - {name: out, type: tx, port: o}
`, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := planYAML(t, tc.yaml, OffloadAuto)
			if p.Moved != tc.moved || !strings.Contains(p.StopReason, tc.why) {
				t.Errorf("moved %d (want %d), stop %q (want %q)\n%s", p.Moved, tc.moved, p.StopReason, tc.why, p.Explain())
			}
			if tc.name == "no filter" && !strings.Contains(p.Explain(), "not a filter") {
				t.Errorf("explain: %s", p.Explain())
			}
		})
	}
	// A balance stage stays on the workers, with the kernel's reason:
	// right after parse, as a rule's action, and as the filter's default.
	for _, tc := range []struct {
		name, yaml string
		moved      int
		why, stop  string
		after      bool
	}{
		{"balance after parse", `name: x
stages:
  - {name: parse, type: parse}
  - {name: lb, type: balance, to: [a, b]}
  - {name: a, type: tx, port: o}
  - {name: b, type: tx, port: p}
`, 0, `stage "lb" after parse is a balance: ` + BalanceKernelReason, "", false},
		{"balance as an action", `name: x
stages:
  - {name: parse, type: parse}
  - name: f
    type: filter
    default: "drop:d"
    rules:
      - {proto: udp, action: "drop:u"}
      - {proto: tcp, action: lb}
  - {name: lb, type: balance, to: [a, b]}
  - {name: a, type: tx, port: o}
  - {name: b, type: tx, port: p}
`, 1, "", `its action lb leads to balance stage "lb": ` + BalanceKernelReason, false},
		{"balance as the default", `name: x
stages:
  - {name: parse, type: parse}
  - name: f
    type: filter
    default: lb
    rules:
      - {proto: udp, action: "drop:u"}
  - {name: lb, type: balance, to: [a, b]}
  - {name: a, type: tx, port: o}
  - {name: b, type: tx, port: p}
`, 1, "", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := planYAML(t, tc.yaml, OffloadAuto)
			ex := p.Explain()
			if p.Moved != tc.moved || p.Why != tc.why || p.StopReason != tc.stop || (p.After != "") != tc.after {
				t.Fatalf("moved %d why %q stop %q after %q\n%s", p.Moved, p.Why, p.StopReason, p.After, ex)
			}
			if !strings.Contains(ex, "xsk_rcv_check") || !strings.Contains(ex, `"lb"`) {
				t.Errorf("explain lacks the kernel's reason:\n%s", ex)
			}
			if tc.after && !strings.Contains(ex, `the split ends there: the filter's default leads to balance stage "lb"`) {
				t.Errorf("explain:\n%s", ex)
			}
		})
	}
	// The table limit: rule 64 stops.
	var b strings.Builder
	b.WriteString("name: x\nstages:\n  - {name: parse, type: parse}\n  - name: f\n    type: filter\n    rules:\n")
	for i := 0; i < KernelMaxRules+2; i++ {
		b.WriteString("      - {proto: udp, dst_port: " + string(rune('1'+i%9)) + ", action: \"drop:d\"}\n")
	}
	b.WriteString("  - {name: out, type: tx, port: o}\n")
	p := planYAML(t, b.String(), OffloadAuto)
	if p.Moved != KernelMaxRules || !strings.Contains(p.StopReason, "holds 64 rules") {
		t.Errorf("moved %d, stop %q", p.Moved, p.StopReason)
	}
}

func TestParseOffloadMode(t *testing.T) {
	for s, want := range map[string]OffloadMode{"": OffloadAuto, "auto": OffloadAuto, "none": OffloadNone} {
		if m, err := ParseOffloadMode(s); err != nil || m != want {
			t.Errorf("%q: %v %v", s, m, err)
		}
	}
	if _, err := ParseOffloadMode("off"); err == nil || !strings.Contains(err.Error(), `"off"`) {
		t.Errorf("bad mode: %v", err)
	}
}

// FuzzKernelRules builds the kernel's tables from rules drawn from the fuzz
// input and checks the kernel lookup against the oracle on class-OK IP
// packets drawn from it too.
func FuzzKernelRules(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte("kernel rules from a short string of choices, several rules long"))
	rnd := rand.New(rand.NewPCG(9, 9))
	seed := make([]byte, 800)
	for i := range seed {
		seed[i] = byte(rnd.IntN(256))
	}
	f.Add(seed)
	f.Fuzz(func(t *testing.T, data []byte) {
		r := &byteRand{b: data}
		n := 1 + r.IntN(KernelMaxRules)
		rules := make([]filterRule, n)
		planned := make([]OffloadRule, n)
		for i := range rules {
			rules[i] = genRule(r)
			planned[i] = OffloadRule{Index: i, Kernel: true, Verdict: rings.VerdictDrop}
		}
		k := buildKernelRules(rules, planned)
		for range 1 + r.IntN(16) {
			m := genMeta(r)
			if fam := filterFamily(m.Flags); fam != famV4 && fam != famV6 {
				continue
			}
			m.Class = rings.ClassOK
			// The kernel runs before any conntrack stage: every frame it
			// sees is untracked, whatever ct state the draw gave.
			m.CT = rings.CTUntracked
			want := oracleMatch(rules, &m)
			if want == n {
				want = -1
			}
			if got := k.KernelLookup(&m); got != want {
				t.Fatalf("kernel rule %d, oracle %d; meta %+v", got, want, m)
			}
		}
	})
}

// TestOffloadFromGraph: the split is planned from the compiled graph (no
// spec, no YAML), once per mode, the same plan to every caller at once;
// rule positions, accept against an action that names the next stage,
// and the rules past the kernel's 64 are as the config says.
func TestOffloadFromGraph(t *testing.T) {
	var b strings.Builder
	b.WriteString(`name: g
stages:
  - {name: parse, type: parse}
  - name: acl
    type: filter
    default: rewrite
    rules:
      - {proto: udp, dst_port: 9, action: "drop:nine"}
`)
	for i := range 70 {
		fmt.Fprintf(&b, "      - {proto: tcp, dst_port: %d, action: \"drop:big\"}\n", 100+i)
	}
	b.WriteString(`      - {proto: udp, dst_port: 8, action: accept}
      - {proto: udp, dst_port: 7, action: rewrite}
  - {name: rewrite, type: rewrite, src_mac: "02:00:00:00:00:01"}
  - {name: out, type: tx, port: out0}
`)
	g, err := Load("g.yaml", []byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	plans := make(chan *OffloadPlan, 8)
	for range 8 {
		go func() { plans <- g.Offload(OffloadAuto) }()
	}
	p := testwait.Recv(t, plans, "the first of 8 concurrent Offload calls", testwait.Deadline)
	for i := range 7 {
		if q := testwait.Recv(t, plans, fmt.Sprintf("concurrent Offload call %d of 8", i+2), testwait.Deadline); q != p {
			t.Fatal("concurrent Offload calls returned different plans")
		}
	}
	if g.Offload(OffloadAuto) != p || g.Offload(OffloadNone) == p || g.Offload(OffloadNone) != g.Offload(OffloadNone) {
		t.Fatal("Offload does not keep one plan per mode")
	}
	if p.Filter != "acl" || len(p.Rules) != 73 || p.Moved != 64 || !strings.Contains(p.StopReason, "holds 64 rules") {
		t.Fatalf("plan: filter %q, %d rules, %d moved, stop %q", p.Filter, len(p.Rules), p.Moved, p.StopReason)
	}
	r0, acc, last := p.Rules[0], p.Rules[71], p.Rules[72]
	if r0.Action != "drop:nine" || r0.Pos != (Pos{File: "g.yaml", Line: 8, Col: 9}) || !r0.Kernel || r0.Verdict != rings.VerdictDrop || r0.Label != "nine" {
		t.Errorf("rule 0: %+v", r0)
	}
	// accept and an action naming the next stage share edge 0 but are
	// different actions to the reader.
	if acc.Action != "accept (to rewrite)" || acc.Pos.Line != 79 || acc.Kernel {
		t.Errorf("rule 71: %+v", acc)
	}
	if last.Action != "rewrite" || last.Pos.Line != 80 || last.Kernel || last.Index != 72 {
		t.Errorf("rule 72: %+v", last)
	}
	if len(p.Kernel.Actions) != 64 || p.Kernel.Actions[0] != KernelDrop {
		t.Errorf("kernel actions %v", p.Kernel.Actions)
	}
	none := g.Offload(OffloadNone)
	if none.Moved != 0 || !strings.Contains(none.Why, "offload: none") {
		t.Errorf("offload none: %+v", none)
	}
}

// largeFilterYAML is a parse → filter → tx pipeline whose filter drops
// UDP port 9 and then has n TCP rules (BENCHMARKS.md's swap timing:
// 100,000).
func largeFilterYAML(n int) []byte {
	var b strings.Builder
	b.WriteString("name: large\nstages:\n  - {name: parse, type: parse}\n  - name: acl\n    type: filter\n    default: out\n    rules:\n" +
		"    - {proto: udp, dst_port: 9, action: \"drop:nine\"}\n")
	for i := range n {
		fmt.Fprintf(&b, "    - {proto: tcp, src_port: %d, dst_port: %d, action: \"drop:big\"}\n", 1+i/60000, 1+i%60000)
	}
	b.WriteString("  - {name: out, type: tx, port: out0}\n")
	return []byte(b.String())
}

// BenchmarkLoadLarge is the compile of a 100,000-rule pipeline, and
// BenchmarkOffloadLarge the part of it that plans the kernel half from
// the compiled graph (what a load adds, and what a swap no longer does
// with a parse of its own):
//
//	go test ./pipelines -run '^$' -bench 'LoadLarge|OffloadLarge' -benchtime 3x
func BenchmarkLoadLarge(b *testing.B) {
	src := largeFilterYAML(100000)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Load("large.yaml", src); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkOffloadLarge(b *testing.B) {
	g, err := Load("large.yaml", largeFilterYAML(100000))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if p := g.planOffload(OffloadAuto); p.Moved != 64 {
			b.Fatalf("moved %d", p.Moved)
		}
	}
}
