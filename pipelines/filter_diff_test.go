package pipelines

import (
	"math/rand/v2"
	"testing"

	"github.com/warpflow/warpflow/rings"
	"go.yaml.in/yaml/v3"
)

// checkAgainstOracle compiles rules and checks every meta against the
// linear oracle.
func checkAgainstOracle(t testing.TB, rules []filterRule, metas []rings.Meta) {
	t.Helper()
	c := buildClassifier(rules)
	for i := range metas {
		want := oracleMatch(rules, &metas[i])
		if got := int(c.lookup(&metas[i])); got != want {
			t.Fatalf("meta %+v: classifier says rule %d, oracle %d\nrules: %+v", metas[i], got, want, rules)
		}
	}
}

// TestFilterDifferential compiles thousands of random rule sets of many
// sizes and checks random packets against the linear oracle. The sets are
// large enough to force real trees (several groups, deep splits, pruning).
func TestFilterDifferential(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	sets := 2000
	if testing.Short() {
		sets = 200
	}
	for s := range sets {
		n := 1 + rnd.IntN(30)
		switch s % 20 {
		case 0, 1, 2:
			n = 30 + rnd.IntN(70)
		case 3:
			n = 100 + rnd.IntN(400)
		}
		rules := genRules(rnd, n)
		metas := genMetas(rnd, 64)
		checkAgainstOracle(t, rules, metas)
	}
}

// TestFilterDifferentialRealistic checks the benchmark rule sets, which
// have the shape (many /32s and /24s, few wildcards) that cuts deep trees.
func TestFilterDifferentialRealistic(t *testing.T) {
	for _, n := range []int{10, 1000, 5000} {
		rnd := rand.New(rand.NewPCG(uint64(n), 7))
		rules := realisticRules(rnd, n)
		metas := realisticMetas(rnd, rules, 2000)
		for i := range 2000 {
			metas = append(metas, genMeta(rnd))
			_ = i
		}
		checkAgainstOracle(t, rules, metas)
	}
}

// FuzzFilterMatch builds random rules and packets from the fuzz input and
// checks the classifier against the oracle; it must never panic.
func FuzzFilterMatch(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7})
	f.Add([]byte("a rule set from a short string of choices, long enough for several rules"))
	rnd := rand.New(rand.NewPCG(5, 5))
	seed := make([]byte, 600)
	for i := range seed {
		seed[i] = byte(rnd.IntN(256))
	}
	f.Add(seed)
	f.Fuzz(func(t *testing.T, data []byte) {
		r := &byteRand{b: data}
		n := r.IntN(40)
		rules := genRules(r, n)
		metas := genMetas(r, 1+r.IntN(16))
		checkAgainstOracle(t, rules, metas)
	})
}

// FuzzFilterConfig builds filter stages from arbitrary YAML: any input must
// give a template or positioned errors, never a panic, and a template must
// route packets to one of its edges.
func FuzzFilterConfig(f *testing.F) {
	f.Add("type: filter\ndefault: 'drop:x'\nrules:\n  - {proto: tcp, dst_port: 23, action: 'drop:telnet'}\n  - {src: [10.0.0.0/8, '2001:db8::/32'], dst_port: 1000-2000, action: accept}\n")
	f.Add("type: filter\nrules:\n  - {vlan: [none, 10-20], tcp_flags: 'syn,!ack', class: malformed, fragment: true, action: other}\n")
	f.Add("type: filter\nrules:\n  - {src_port: 2000-1000, proto: tcpp}\n")
	f.Fuzz(func(t *testing.T, src string) {
		var doc yaml.Node
		if yaml.Unmarshal([]byte(src), &doc) != nil || len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
			return
		}
		tpl, errs := buildFilterYAML(t, src, true)
		if tpl == nil {
			for _, e := range errs.Errs {
				if e.Pos.Line == 0 {
					t.Fatalf("error without a position: %v", e)
				}
			}
			return
		}
		rnd := rand.New(rand.NewPCG(uint64(len(src)), 1))
		for range 8 {
			m := genMeta(rnd)
			runFilter(t, tpl, m)
		}
	})
}
