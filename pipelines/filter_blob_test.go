package pipelines

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/warpflow/warpflow/internal/allocs"
	"github.com/warpflow/warpflow/rings"
)

// checkBlob checks that the serialised classifier answers every meta as
// the classifier does.
func checkBlob(t *testing.T, rules []filterRule, metas []rings.Meta) {
	t.Helper()
	c := buildClassifier(rules)
	b := c.serialise()
	if b.Words[bhWords] != uint64(len(b.Words)) || b.Words[bhMagic] != FilterBlobMagic {
		t.Fatalf("blob header: words %d of %d, magic %#x", b.Words[bhWords], len(b.Words), b.Words[bhMagic])
	}
	for i := range metas {
		var k FilterKey
		FilterKeyOf(&metas[i], &k)
		if got, want := b.Lookup(&k), c.lookup(&metas[i]); got != want {
			t.Fatalf("meta %+v: blob says rule %d, classifier %d", metas[i], got, want)
		}
	}
}

// TestFilterBlobDifferential: the blob lookup agrees with the classifier
// on random rule sets (trees, gates, pre-gates, exact checks, interval
// sets) and random packets.
func TestFilterBlobDifferential(t *testing.T) {
	rnd := rand.New(rand.NewPCG(3, 4))
	sets := 600
	if testing.Short() {
		sets = 100
	}
	for s := range sets {
		n := 1 + rnd.IntN(30)
		if s%10 == 0 {
			n = 100 + rnd.IntN(400)
		}
		rules := genRules(rnd, n)
		metas := genMetas(rnd, 64)
		checkBlob(t, rules, metas)
	}
}

// TestFilterBlobRealistic: the same on the benchmark-shaped rule sets,
// which have pre-gates and deep trees.
func TestFilterBlobRealistic(t *testing.T) {
	for _, n := range []int{10, 1000, 5000} {
		rnd := rand.New(rand.NewPCG(uint64(n), 9))
		rules := realisticRules(rnd, n)
		checkBlob(t, rules, realisticMetas(rnd, rules, 3000))
	}
}

// TestFilterBlobLookupAllocs: the blob lookup allocates nothing.
func TestFilterBlobLookupAllocs(t *testing.T) {
	rnd := rand.New(rand.NewPCG(5, 6))
	rules := realisticRules(rnd, 100)
	b := buildClassifier(rules).serialise()
	metas := realisticMetas(rnd, rules, 64)
	var k FilterKey
	if n := allocs.Count(100, func() {
		for i := range metas {
			FilterKeyOf(&metas[i], &k)
			b.Lookup(&k)
		}
	}); n != 0 {
		t.Fatalf("%d allocations in 100 runs, want 0", n)
	}
}

// TestGraphFilter: the program of a parse → filter pipeline names each
// rule's terminal verdict; a pipeline without that shape is refused.
func TestGraphFilter(t *testing.T) {
	g, err := Load("split.yaml", []byte(`name: split
stages:
  - {name: parse, type: parse}
  - name: classify
    type: filter
    default: "drop:unmatched"
    rules:
      - {proto: tcp, dst_port: 80, action: web}
      - {proto: udp, dst_port: 53, action: kernel}
      - {proto: udp, dst_port: 54, action: more}
  - {name: web, type: tx, port: web0}
  - {name: kernel, type: pass}
  - {name: more, type: count, next: web}
`))
	if err != nil {
		t.Fatal(err)
	}
	p, err := GraphFilter(g)
	if err != nil {
		t.Fatal(err)
	}
	if p.Blob.Rules != 3 || len(p.Terminal) != 4 {
		t.Fatalf("rules %d, terminal %v", p.Blob.Rules, p.Terminal)
	}
	want := []struct {
		term bool
		v    rings.Verdict
	}{{true, rings.VerdictTX}, {true, rings.VerdictPass}, {false, 0}, {true, rings.VerdictDrop}}
	for r, w := range want {
		if p.Terminal[r] != w.term || p.Terminal[r] && p.Verdict[r] != w.v {
			t.Errorf("rule %d: terminal %v verdict %v, want %v %v", r, p.Terminal[r], p.Verdict[r], w.term, w.v)
		}
	}
	if p.AllTerminal() {
		t.Error("AllTerminal with a count stage behind rule 2")
	}
	g2, err := Load("d.yaml", []byte("name: d\nstages:\n  - {name: sink, type: drop, reason: x}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := GraphFilter(g2); err != ErrNoFilter {
		t.Fatalf("drop-only pipeline: %v, want ErrNoFilter", err)
	}
}

// TestSettingsBackend: settings.backend takes cpu or cuda (absent: ""),
// anything else is an error naming the value.
func TestSettingsBackend(t *testing.T) {
	for _, c := range []struct{ in, want, err string }{
		{"", "", ""}, {"backend: cpu", "cpu", ""}, {"backend: cuda", "cuda", ""},
		{"backend: tpu", "", `settings.backend "tpu": want cpu or cuda`},
	} {
		y := "name: b\nsettings: {" + c.in + "}\nstages:\n  - {name: sink, type: drop, reason: x}\n"
		g, err := Load("b.yaml", []byte(y))
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: error %v, want %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%q: %v", c.in, err)
		}
		if got := g.Settings().Backend; got != c.want {
			t.Errorf("%q: backend %q, want %q", c.in, got, c.want)
		}
	}
}
