package yamlbound

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/warpflow/warpflow/internal/benchshape"
	"go.yaml.in/yaml/v3"
)

// wide are limits nothing here reaches, for comparing counts with yaml.v3.
var wide = Limits{MaxBytes: 1 << 30, MaxDepth: 20000, MaxNodes: 1 << 30}

// v3Tree is what yaml.v3 builds from data: every document's nodes, the
// deepest collection nesting, and whether any node has an anchor or is an
// alias. err is yaml.v3's error, if any document failed.
type v3Tree struct {
	nodes, depth, docs int
	anchors            bool
	err                error
}

func v3Read(data []byte) v3Tree {
	var t v3Tree
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return t
		}
		if err != nil {
			t.err = err
			return t
		}
		t.docs++
		var walk func(n *yaml.Node, d int)
		walk = func(n *yaml.Node, d int) {
			t.nodes++
			if n.Anchor != "" || n.Kind == yaml.AliasNode {
				t.anchors = true
			}
			if n.Kind == yaml.MappingNode || n.Kind == yaml.SequenceNode {
				d++
				t.depth = max(t.depth, d)
			}
			for _, c := range n.Content {
				walk(c, d)
			}
		}
		walk(&doc, 0)
	}
}

// compare holds Check to its contract on data, against what yaml.v3
// makes of it, and returns the Limit of a refusal that the contract
// allows ("" when Check accepted it, or yaml.v3 refuses it):
//
//   - whatever yaml.v3 reads with an anchor or an alias in it, Check
//     refuses;
//   - what yaml.v3 reads without one, Check refuses only in the documented
//     cases: an "&" or "*" word in an unquoted value or in a tag
//     (LimitAmbiguous), a byte order mark (LimitEncoding);
//   - otherwise its node count is at least yaml.v3's (and, for the
//     looseness doc.go states, at most one more per "!"), its depth and
//     document count are yaml.v3's, and it noticed no syntax error.
func compare(t *testing.T, name string, data []byte) string {
	t.Helper()
	want := v3Read(data)
	st, err := Check(data, wide)
	if want.err != nil {
		return "" // yaml.v3 refuses it: nothing to hold Check to but not panicking
	}
	var be *Error
	if want.anchors {
		if err == nil {
			t.Fatalf("%s: yaml.v3 builds an anchor or alias but Check accepts it\n%q", name, data)
		}
		return ""
	}
	if err != nil {
		if errors.As(err, &be) && documentedRefusal(be) {
			return be.Limit
		}
		t.Fatalf("%s: Check refuses what yaml.v3 reads without anchors, for no documented reason: %v\n%q", name, err, data)
	}
	if st.Nodes < want.nodes || st.Depth < want.depth {
		t.Fatalf("%s: Check counted %d nodes, depth %d, under yaml.v3's tree: %d nodes, depth %d\n%q", name, st.Nodes, st.Depth, want.nodes, want.depth, data)
	}
	if slack := bytes.Count(data, []byte("!")); st.Nodes > want.nodes+slack {
		t.Fatalf("%s: Check counted %d nodes, yaml.v3 built %d: looser than doc.go says\n%q", name, st.Nodes, want.nodes, data)
	}
	if st.Depth != want.depth || st.Documents != want.docs {
		t.Fatalf("%s: Check read depth %d, %d documents; yaml.v3 built depth %d, %d documents\n%q", name, st.Depth, st.Documents, want.depth, want.docs, data)
	}
	if !st.Complete {
		t.Fatalf("%s: Check noticed a syntax error at line %d, column %d that yaml.v3 does not find\n%q", name, st.ErrorLine, st.ErrorCol, data)
	}
	return ""
}

// documentedRefusal reports whether be is one of the refusals doc.go
// documents for input yaml.v3 reads without anchors.
func documentedRefusal(be *Error) bool {
	switch be.Limit {
	case LimitEncoding:
		return true
	case LimitAmbiguous:
		return strings.HasPrefix(be.Msg, `"&`) && strings.Contains(be.Msg, "quote the value") ||
			strings.HasPrefix(be.Msg, `"*`) && strings.Contains(be.Msg, "quote the value") ||
			strings.HasPrefix(be.Msg, "a tag with") ||
			strings.HasPrefix(be.Msg, `a "?" with no key in a flow sequence`)
	}
	return false
}

// samples are YAML forms configs use, and corners of YAML and of yaml.v3.
var samples = []string{
	"",
	"# only a comment\n",
	"a: 1\n",
	"a:\n",
	"a:\nb:\n",
	"a:\n  b: 1\n  c:\n    - x\n    - y\n",
	"a:\n- x\n- y\nb: 2\n",
	"- a\n- b: 1\n  c: 2\n- - x\n  - y\n-\n",
	"{a: 1, b, c: }\n",
	"[a, b: c, ? d, : e, ]\n",
	"[a: b, {c: d}, [e]]\n",
	"? a\n: b\n? c\n",
	"? - a\n  - b\n: x\n",
	"key: |\n  line &a\n  *b\nnext: >-\n  folded\n\n  text\n",
	"key: |2-\n    indented\n  x: 1\n",
	"a: 'it''s & *'\nb: \"q \\\" &x \\n\"\nc: \"multi\n  line\"\n",
	"a: x &b\nc: y *d\ne: f#g\nh: i # &j\n",
	"url: http://a?b=1&c=2\nglob: a*b\n",
	"a: !!str 1\nb: !!int '2'\nc: !custom x\nd: !<tag:yaml.org,2002:str> y\ne: !!null\n",
	"- !!map {a: 1}\n- !!seq\n- ! x\n",
	"%YAML 1.1\n---\na: 1\n...\n",
	"---\na: 1\n---\nb: 2\n",
	"--- x\n--- [y]\n",
	"---\n",
	"a: b\n  c\n  d\ne: f\n",
	"a: plain\n  continued: not a key\n",
	"\ta: 1\n",
	"a:\t1\n",
	"{a: 1,\n b: 2,\n  c: [1,\n 2]}\n",
	"a: {b: {c: {d: [1, [2, [3]]]}}}\n",
	"- {name: parse, type: parse}\n- {name: f, type: filter, rules: [{dst: 10.0.0.0/8, action: drop}]}\n",
	"a: \"\\x41\\u00e9\\U0001F600\"\n",
	"é: ü\nключ: значение\n",
	"a: 1\r\nb: 2\r\n",
	"a: [1, 2\n",
	"a: b: c\n",
	"- a\nb: 1\n",
	"[a, b]: c\n",
	"{a: 1}: x\n",
	"\"k\": v\n'k2': v2\n",
	"a: -1\nb: - x\n",
	"- -1\n- -x\n- --\n",
	"?x\n:y\n",
	"[?x, :y, -z]\n",
	"{? a: b}\n",
	"a: [b, c]d\n",
	": v\n",
	"- : v\n",
	"[:]\n",
	"{:}\n",
	"a\n",
	"a #c\n",
	"'a'\n",
	"|\n  x\n",
	"- |\n x\n- >\n y\n",
	"k: >\n\n  a\n b\n",
	// yaml.v3's own corners, found by the fuzz targets.
	"0:\n>\n",                // a block scalar at its key's column is the value
	"k: [k: [?]]]\n",         // refused: yaml.v3's scanner and parser differ on "?]"
	"?\n- a\n: - b\n  - c\n", // sequences at the mapping's column, as the key and on the value's line
	"!!str \n!t x\n",         // two tags on one node
}

// TestHoldsToYAMLv3 holds Check to its contract (compare) on the samples,
// a generated pipeline and every YAML file in the repository, none of
// which it may refuse but for the samples' "&" and "*" words.
func TestHoldsToYAMLv3(t *testing.T) {
	for i, s := range samples {
		if lim := compare(t, fmt.Sprintf("sample %d", i), []byte(s)); lim != "" && lim != LimitAmbiguous {
			t.Errorf("sample %d: refused (%s)", i, lim)
		}
	}
	if lim := compare(t, "benchshape 1000", []byte(benchshape.Default("b", 1000))); lim != "" {
		t.Errorf("benchshape 1000: refused (%s)", lim)
	}
	// Every YAML file in the repository: pipelines (valid and invalid),
	// the daemon's example config, CI and deploy.
	for path, data := range RepoYAML(t) {
		if lim := compare(t, path, data); lim != "" {
			t.Errorf("%s: refused (%s)", path, lim)
		}
	}
}

// RepoYAML returns every YAML file in the repository by its path (for
// repo_test.go too, which checks them under the callers' limits).
func RepoYAML(t testing.TB) map[string][]byte {
	files := map[string][]byte{}
	err := filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if !d.IsDir() && (strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".yml")) {
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			files[path] = data
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 25 {
		t.Fatalf("found only %d YAML files in the repository", len(files))
	}
	return files
}

// tricky are inputs where an anchor's place depends on where a span of
// text ends: a quoted, block or plain scalar, a comment, a line (at each
// kind of break). yaml.v3 reads each (TestTricky checks that it does, and
// finds an anchor exactly where anchor says).
var tricky = []struct {
	src    string
	anchor bool
}{
	// Anchors, after the span that hides them ends.
	{"a: 'x' \nb: &y 1\n", true},
	{"a: 'multi\n line'\nb: &z 1\n", true},
	{"a: \"esc \\\" quote\"\nb: &w 1\n", true},
	{"a: \"x\\\ny\"\nb: &t 1\n", true},
	{"key: 'it''s' \nk: &s 1\n", true},
	{"a: |\n  text\nb: &y 1\n", true},
	{"a: |\n x\n y\n&q b: c\n", true},
	{"a: |-\n  x\n\n&k b: c\n", true},
	{"a: >\n\n  x\n\nb: &r 1\n", true},
	{"a:\n>\n&x b: c\n", true},
	{"a: # c\n  &x b\n", true},
	{"a: b #c'\nd: &e f\n", true},
	{"- 'a' #\"\n- &x b\n", true},
	{"# c\u0085&x a: b\n", true},
	{"a: b\u2028&x c: d\n", true},
	{"a: b\r&x c: d\n", true},
	{"[\"a\",&x b]\n", true},
	{"[?&x a]\n", true},
	{"{\"k\":&x v}\n", true},
	{"[a,\n&x b]\n", true},
	{"a: [b, 'c]', &u d]\n", true},
	{"? &v a\n: b\n", true},
	{"!!str &w a: b\n", true},
	{"a: !t &z b\n", true},
	{"--- &x a\n", true},
	{"a: b\n...\n--- &x c\n", true},
	// No anchors: "&", "*", quotes and "#" inside spans.
	{"a: 'x &y *z'\n", false},
	{"a: \"&y\"\n", false},
	{"a: |\n  &x *y\n", false},
	{"a: |\n  'unclosed\nb: 1\n", false},
	{"a: b # 'unclosed\nc: 1\n", false},
	{"# &x\na: 1\n", false},
	{"a: 'x''y' # *z\n", false},
	{"url: http://h/?a=1&b=2\n", false},
	{"a: b&c\n", false},
	{"a: 2 * 3\n", false},
	{"[a&b, c*d]\n", false},
}

func TestTricky(t *testing.T) {
	for _, tc := range tricky {
		want := v3Read([]byte(tc.src))
		if want.err != nil || want.anchors != tc.anchor {
			t.Fatalf("%q: yaml.v3 reads it with error %v, anchors %v: not the case it claims to be", tc.src, want.err, want.anchors)
		}
		if lim := compare(t, "tricky", []byte(tc.src)); lim != "" {
			t.Errorf("%q: refused (%s), though nothing in it is ambiguous", tc.src, lim)
		}
		_, err := Check([]byte(tc.src), wide)
		var be *Error
		if tc.anchor && (!errors.As(err, &be) || be.Limit != LimitAnchor) {
			t.Errorf("%q: got %v, want an anchor refused", tc.src, err)
		}
	}
}

// TestRefusesAmbiguousWords: the documented refusals of what yaml.v3
// reads without an anchor, each with a message that says to quote it.
func TestRefusesAmbiguousWords(t *testing.T) {
	for _, tc := range []struct {
		src       string
		line, col int
		msg       string
	}{
		{"a: x &y\n", 1, 6, `"&y" in an unquoted value reads as an anchor to some YAML readers: quote the value`},
		{"cmd: ls *.txt\n", 1, 9, `"*.txt" in an unquoted value reads as an alias to some YAML readers: quote the value`},
		{"a: b\n  &c\n", 2, 3, `"&c" in an unquoted value`},
		{"a: x-&y\n", 1, 6, `"&y" in an unquoted value`},
		{"é: ü&x\n", 1, 5, `"&x" in an unquoted value`},
		{"a: !t&x b\n", 1, 6, `a tag with '&' in it: not supported`},
		{"[?], [a]]\n", 1, 3, `a "?" with no key in a flow sequence: yaml.v3 reads it two ways; write the key`},
		{"[?::]\n", 1, 3, `a "?" with no key in a flow sequence`},
	} {
		if v := v3Read([]byte(tc.src)); v.err != nil || v.anchors {
			t.Fatalf("%q: yaml.v3 reads it with error %v, anchors %v", tc.src, v.err, v.anchors)
		}
		_, err := Check([]byte(tc.src), wide)
		var be *Error
		if !errors.As(err, &be) || be.Limit != LimitAmbiguous || be.Line != tc.line || be.Col != tc.col || !strings.HasPrefix(be.Msg, tc.msg) {
			t.Errorf("%q: got %#v, want line %d col %d %s", tc.src, err, tc.line, tc.col, tc.msg)
		}
	}
}

func TestRefusesAnchorsAndAliasesAtTheirToken(t *testing.T) {
	for _, tc := range []struct {
		src       string
		line, col int
		msg       string
	}{
		{"a: &x 1\n", 1, 4, `yaml anchor "&x"`},
		{"a: 1\nb: *x\n", 2, 4, `yaml alias "*x"`},
		{"&x a: 1\n", 1, 1, `yaml anchor "&x"`},
		{"- [1, *y]\n", 1, 7, `yaml alias "*y"`},
		{"{k: !!str &z v}\n", 1, 11, `yaml anchor "&z"`},
		{"<<: *base\n", 1, 5, `yaml alias "*base"`},
		{"a:\n  - &" + strings.Repeat("n", 5000) + " 1\n", 2, 5, `yaml anchor "&` + strings.Repeat("n", 32) + `"...`},
		{"? *k\n", 1, 3, `yaml alias "*k"`},
	} {
		_, err := Check([]byte(tc.src), wide)
		var be *Error
		if !errors.As(err, &be) || be.Limit != LimitAnchor || be.Line != tc.line || be.Col != tc.col || !strings.HasPrefix(be.Msg, tc.msg) {
			t.Errorf("%q: got %#v, want line %d col %d %s", tc.src, err, tc.line, tc.col, tc.msg)
			continue
		}
		if len(be.Error()) > 120 {
			t.Errorf("%q: message echoes too much: %d bytes", tc.src, len(be.Error()))
		}
	}
}

func TestLimitsNamedInTheError(t *testing.T) {
	lim := Limits{MaxBytes: 1 << 20, MaxDepth: 8, MaxNodes: 100}
	for _, tc := range []struct {
		name, src, limit, msg string
	}{
		{"flow depth", strings.Repeat("[", 9) + strings.Repeat("]", 9), LimitDepth, "nesting deeper than 8 levels"},
		{"block depth", func() string {
			var b strings.Builder
			for i := range 9 {
				b.WriteString(strings.Repeat(" ", i) + "k:\n")
			}
			return b.String() + strings.Repeat(" ", 9) + "v\n"
		}(), LimitDepth, "nesting deeper than 8 levels"},
		{"sequence depth", "- - - - - - - - - x\n", LimitDepth, "nesting deeper than 8 levels"},
		{"nodes", "[" + strings.Repeat("0,", 100) + "0]", LimitNodes, "more than 100 YAML nodes"},
		{"bytes", strings.Repeat("#", 1<<20+1), LimitBytes, "1048577 bytes: over the limit of 1048576 bytes"},
		{"utf-16", "\xff\xfea\x00:\x00", LimitEncoding, "UTF-16"},
		{"byte order mark inside", "a: 1\nb: \ufeffx\n", LimitEncoding, "a byte order mark inside the input"},
	} {
		_, err := Check([]byte(tc.src), lim)
		var be *Error
		if !errors.As(err, &be) || be.Limit != tc.limit || !strings.Contains(be.Msg, tc.msg) {
			t.Errorf("%s: got %v, want %s: %s", tc.name, err, tc.limit, tc.msg)
		}
	}
	// At the limits exactly: accepted.
	for _, src := range []string{strings.Repeat("[", 8) + strings.Repeat("]", 8), "[" + strings.Repeat("0,", 97) + "0]"} {
		if _, err := Check([]byte(src), lim); err != nil {
			t.Errorf("%.20q...: %v", src, err)
		}
	}
}

// allocated runs f and returns the bytes it allocated on the heap.
func allocated(f func()) uint64 {
	var a, b runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&a)
	f()
	runtime.ReadMemStats(&b)
	return b.TotalAlloc - a.TotalAlloc
}

// AliasBomb is size bytes of nested aliases: each level a list of nine
// aliases of the one before, the expansion yaml.v3's decoders walk into.
func AliasBomb(size int) []byte {
	var b bytes.Buffer
	b.WriteString("a0: &a0 [x, x, x, x, x, x, x, x, x]\n")
	for i := 1; b.Len() < size; i++ {
		fmt.Fprintf(&b, "a%d: &a%d [*a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d]\n", i, i, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1)
	}
	return b.Bytes()[:size]
}

func TestHostileInputCostsNothing(t *testing.T) {
	lim := Limits{MaxBytes: 64 << 20, MaxDepth: 64, MaxNodes: 4_000_000}
	// 10 MB, 5 million nodes in one flow list: within the size limit.
	tiny := append(append([]byte("["), bytes.Repeat([]byte("0,"), 5_000_000)...), "0]"...)
	for _, tc := range []struct {
		name  string
		data  []byte
		limit string
	}{
		{"1 MiB of nested aliases", AliasBomb(1 << 20), LimitAnchor},
		{"1 MiB of [[[[", bytes.Repeat([]byte("["), 1<<20), LimitDepth},
		{"1 MiB of - - - -", bytes.Repeat([]byte("- "), 1<<19), LimitDepth},
		{"millions of tiny nodes", tiny, LimitNodes},
	} {
		var err error
		n := allocated(func() { _, err = Check(tc.data, lim) })
		var be *Error
		if !errors.As(err, &be) || be.Limit != tc.limit {
			t.Errorf("%s: got %v, want a %s refusal", tc.name, err, tc.limit)
		}
		// Check's state is the reader and its two stacks, which start
		// at 16 levels each and grow to at most MaxDepth (64 here);
		// nothing grows with the input.
		if n > 16<<10 {
			t.Errorf("%s: Check allocated %d bytes", tc.name, n)
		}
		t.Logf("%s (%d bytes): refused with %q, %d bytes allocated", tc.name, len(tc.data), err, n)
	}
}

func BenchmarkRefuse(b *testing.B) {
	lim := Limits{MaxBytes: 64 << 20, MaxDepth: 64, MaxNodes: 4_000_000}
	tiny := append([]byte("["), bytes.Repeat([]byte("0,"), 5_000_000)...)
	for _, bc := range []struct {
		name string
		data []byte
	}{
		{"alias-bomb-1MiB", AliasBomb(1 << 20)},
		{"flow-depth-1MiB", bytes.Repeat([]byte("["), 1<<20)},
		{"tiny-nodes-10MB", tiny},
		{"benchshape-100k-rules", []byte(benchshape.Default("b", 100_000))},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(bc.data)))
			for b.Loop() {
				Check(bc.data, lim)
			}
		})
	}
}

func TestQuote(t *testing.T) {
	for _, tc := range []struct {
		s    string
		max  int
		want string
	}{
		{"abc", 5, `"abc"`},
		{"abcdef", 3, `"abc"...`},
		{"ééé", 3, `"é"...`}, // never half a character
	} {
		if got := Quote(tc.s, tc.max); got != tc.want {
			t.Errorf("Quote(%q, %d) = %s, want %s", tc.s, tc.max, got, tc.want)
		}
	}
}

// FuzzCheckBoundsYAMLv3 holds Check to its contract (compare) on any
// input: yaml.v3's anchors and aliases refused, its counts bounded, no
// refusal but the documented ones; and under tight limits, no panic and
// nothing accepted past them.
func FuzzCheckBoundsYAMLv3(f *testing.F) {
	for _, s := range samples {
		f.Add([]byte(s))
	}
	for _, s := range tricky {
		f.Add([]byte(s.src))
	}
	f.Add([]byte(benchshape.Default("b", 5)))
	f.Add([]byte("a: &x [1]\nb: *x\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 1<<16 {
			return
		}
		compare(t, "fuzz", data)
		tight(t, data)
	})
}

// FuzzCheckFragments is FuzzCheckBoundsYAMLv3 over inputs put together
// from YAML's pieces (each input byte picks one), which reach the
// structures yaml.v3 accepts far more often than bytes do.
func FuzzCheckFragments(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3})
	f.Add([]byte("key: value, - item"))
	f.Fuzz(func(t *testing.T, picks []byte) {
		if len(picks) > 4096 {
			return
		}
		data := fragmentsOf(picks)
		compare(t, "fragments", data)
		tight(t, data)
	})
}

// TestFragments runs FuzzCheckFragments' property over a fixed set of
// random inputs, so that every run of the tests tries some.
var fragmentRuns = 20_000

func TestFragments(t *testing.T) {
	rng := rand.New(rand.NewPCG(18, 6))
	n, refused := 0, map[string]int{}
	for range fragmentRuns {
		picks := make([]byte, 1+rng.IntN(40))
		for i := range picks {
			picks[i] = byte(rng.UintN(256))
		}
		data := fragmentsOf(picks)
		if v3Read(data).err == nil {
			n++
		}
		if lim := compare(t, "fragments", data); lim != "" {
			refused[lim]++
		}
	}
	if n < fragmentRuns/10 {
		t.Fatalf("only %d of %d inputs are YAML that yaml.v3 reads: the property is barely tried", n, fragmentRuns)
	}
	t.Logf("%d inputs, %d read by yaml.v3; documented refusals of those without anchors: %v", fragmentRuns, n, refused)
}

// fragments are the pieces FuzzCheckFragments builds inputs of: the
// indicators, scalars of each style, breaks of each kind, indentation.
var fragments = []string{
	"\n", "\n", "\n ", "\n  ", "\n   ", "\n    ", "\n      ", " ", "  ", "\t", "\r\n", "\r", "\u2028", "\u2029", "\u0085", "\ufeff",
	"- ", "-", "? ", "?", ": ", ":", ",", ", ", "[", "]", "{", "}",
	"a", "b c", "k: v", "k:", "- x", "k: [", "k: {", "0", "-1", "é", "x&y", "x *y", "a#b", "http://h/?a=1&b=2",
	"'q'", "'it''s'", "'m\n l'", "'", "\"d\"", "\"e\\\"f\"", "\"m\n l\"", "\"\\\n\"", "\"",
	"|", ">", "|2", "|-", ">+", "|1-", "| #c",
	"#c", " #c", "# &a\n",
	"!t ", "!!str ", "!<x> ", "!", "&a ", "*a", "&", "*",
	"---", "--- ", "...", "%YAML 1.2", "%TAG ! x:",
	"\\", "@", "`", "%",
}

func fragmentsOf(picks []byte) []byte {
	var b bytes.Buffer
	for _, p := range picks {
		b.WriteString(fragments[int(p)%len(fragments)])
	}
	return b.Bytes()
}

// tight checks that under tight limits Check neither panics nor accepts
// anything past them.
func tight(t *testing.T, data []byte) {
	t.Helper()
	lim := Limits{MaxBytes: 1 << 16, MaxDepth: 4, MaxNodes: 50}
	if st, err := Check(data, lim); err == nil && (st.Nodes > 50 || st.Depth > 4) {
		t.Fatalf("accepted %+v past the limits", st)
	}
}
