package yamlbound

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
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

// compare checks Check against yaml.v3 on data that yaml.v3 reads.
func compare(t *testing.T, name string, data []byte) {
	t.Helper()
	want := v3Read(data)
	st, err := Check(data, wide)
	if want.err != nil {
		return // yaml.v3 refuses it: nothing to compare (Check must only not panic)
	}
	var be *Error
	if errors.As(err, &be) && be.Limit == LimitEncoding {
		return // UTF-16, refused by design (yaml.v3 would convert it)
	}
	if want.anchors {
		if !errors.As(err, &be) || be.Limit != LimitAnchor {
			t.Fatalf("%s: yaml.v3 builds anchors or aliases but Check says %v\n%q", name, err, data)
		}
		return
	}
	if err != nil {
		t.Fatalf("%s: Check refuses what yaml.v3 reads without anchors: %v\n%q", name, err, data)
	}
	if !st.Complete || st.Nodes != want.nodes || st.Depth != want.depth || st.Documents != want.docs {
		t.Fatalf("%s: Check read %+v, yaml.v3 built %d nodes, depth %d, %d documents\n%q", name, st, want.nodes, want.depth, want.docs, data)
	}
}

// samples are YAML forms configs use and corners of the scanner.
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
}

func TestMatchesYAMLv3(t *testing.T) {
	for i, s := range samples {
		compare(t, fmt.Sprintf("sample %d", i), []byte(s))
	}
	compare(t, "benchshape 1000", []byte(benchshape.Default("b", 1000)))
	// Every YAML file in the repository: pipelines (valid and invalid),
	// the daemon's example config, CI and docs.
	n := 0
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
			compare(t, path, data)
			n++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 10 {
		t.Fatalf("compared only %d YAML files from the repository", n)
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
		// Check's state is a few small stacks and the token queue, which
		// holds at most a simple key's 1024 characters of lookahead
		// (about 100 KiB with its growth); nothing grows with the input.
		if n > 256<<10 {
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

func FuzzCheckMatchesYAMLv3(f *testing.F) {
	for _, s := range samples {
		f.Add([]byte(s))
	}
	f.Add([]byte(benchshape.Default("b", 5)))
	f.Add([]byte("a: &x [1]\nb: *x\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 1<<16 {
			return
		}
		// yaml.v3 skips a byte order mark at a line start only when its
		// buffer happens to begin there: not something to match.
		if bytes.Contains(data[min(len(data), 3):], []byte("\xef\xbb\xbf")) {
			Check(data, wide) // must not panic
			return
		}
		compare(t, "fuzz", data)
		// And under tight limits it must not panic or run past them.
		lim := Limits{MaxBytes: 1 << 16, MaxDepth: 4, MaxNodes: 50}
		if st, err := Check(data, lim); err == nil && (st.Nodes > 50 || st.Depth > 4) {
			t.Fatalf("accepted %+v past the limits", st)
		}
	})
}
