package pipelines

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/warpflow/warpflow/internal/yamlbound"
)

// aliasBomb is a pipeline of about size bytes whose filter's options nest
// aliases nine wide: issue 18's 488-byte one took 447 MB in validate.
func aliasBomb(size int) []byte {
	var b bytes.Buffer
	b.WriteString("name: bomb\nstages:\n  - name: f\n    type: filter\n    x0: &a0 [k, k, k, k, k, k, k, k, k]\n")
	for i := 1; b.Len() < size; i++ {
		fmt.Fprintf(&b, "    x%d: &a%d [*a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d]\n", i, i, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1)
	}
	return b.Bytes()
}

// heapCost runs f and returns the bytes it allocated and the time it took.
func heapCost(f func()) (uint64, time.Duration) {
	var a, b runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&a)
	t0 := time.Now()
	f()
	d := time.Since(t0)
	runtime.ReadMemStats(&b)
	return b.TotalAlloc - a.TotalAlloc, d
}

// TestHostileYAMLIsRefusedBeforeDecoding is issue 18 item 6: nested
// aliases, deep nesting and millions of nodes are refused by the bounded
// reader before yaml.v3 builds a tree, at a cost that does not grow with
// the input (bytes allocated, all of them, not just what stays live).
// The time is logged, not asserted; BenchmarkRefuseHostile measures it.
func TestHostileYAMLIsRefusedBeforeDecoding(t *testing.T) {
	tiny := append(append([]byte("name: t\nstages: ["), bytes.Repeat([]byte("0,"), MaxConfigNodes)...), "0]\n"...)
	for _, tc := range []struct {
		name, want string
		data       []byte
	}{
		// The small one first: on a reader without the bound it costs
		// hundreds of MB and fails here, before the 1 MiB one runs.
		{"488-byte alias bomb", `bomb.yaml:5:9: yaml anchor "&a0": anchors and aliases are not supported in pipeline configs`, aliasBomb(488)},
		{"1 MiB alias bomb", `bomb.yaml:5:9: yaml anchor "&a0": anchors and aliases are not supported in pipeline configs`, aliasBomb(1 << 20)},
		{"1 MiB of [[[[", fmt.Sprintf("bomb.yaml:1:%d: config refused: nesting deeper than %d levels (the limit for a config)", MaxConfigDepth+1, MaxConfigDepth), bytes.Repeat([]byte("["), 1<<20)},
		{"4 million tiny nodes", fmt.Sprintf("config refused: more than %d YAML nodes (the limit for a config)", MaxConfigNodes), tiny},
	} {
		var err error
		n, d := heapCost(func() { _, err = Load("bomb.yaml", tc.data) })
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%s: err = %v, want %s", tc.name, err, tc.want)
		}
		if n > 1<<20 {
			t.Fatalf("%s: refusing it allocated %d bytes, want under 1 MiB", tc.name, n)
		}
		t.Logf("%s (%d bytes): refused in %v, %d bytes allocated: %v", tc.name, len(tc.data), d, n, err)
	}
}

// TestReadConfigFileReadsOnce: a config file is read into one buffer of
// its size (io.ReadAll's doubling touched about twice the file: a 1 MiB
// alias bomb cost warpctl validate 1.9 MB of RSS to refuse), so reading and
// refusing the 1 MiB bomb from a file allocates the file and a few KB; a
// file over the limit is refused after reading at most one byte past it.
func TestReadConfigFileReadsOnce(t *testing.T) {
	dir := t.TempDir()
	bomb := aliasBomb(1 << 20)
	path := dir + "/bomb.yaml"
	if err := os.WriteFile(path, bomb, 0o600); err != nil {
		t.Fatal(err)
	}
	var err error
	n, d := heapCost(func() {
		var data []byte
		if data, err = ReadConfigFile(path); err == nil {
			_, err = Load("bomb.yaml", data)
		}
	})
	if err == nil || !strings.Contains(err.Error(), "anchors and aliases are not supported") {
		t.Fatalf("err = %v", err)
	}
	if max := uint64(len(bomb)) + 32<<10; n > max {
		t.Fatalf("reading and refusing a %d-byte file allocated %d bytes, want at most %d", len(bomb), n, max)
	}
	t.Logf("%d-byte alias bomb read and refused in %v, %d bytes allocated", len(bomb), d, n)

	// Over the limit: refused by its size, unread.
	big := path + ".big"
	if err := os.WriteFile(big, bytes.Repeat([]byte("#"), MaxConfigBytes+4096), 0o600); err != nil {
		t.Fatal(err)
	}
	n, _ = heapCost(func() { _, err = ReadConfigFile(big) })
	if err == nil || !strings.Contains(err.Error(), "larger than the limit") {
		t.Fatalf("oversize: err = %v", err)
	}
	if max := uint64(32 << 10); n > max {
		t.Fatalf("oversize: allocated %d bytes, want at most %d", n, max)
	}
	// A FIFO (no size to go by) is read too.
	fifo := dir + "/fifo.yaml"
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	go func() {
		if f, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
			f.Write([]byte("name: f\n"))
			f.Close()
		}
	}()
	type result struct {
		data []byte
		err  error
	}
	got := make(chan result, 1)
	go func() { d, err := ReadConfigFile(fifo); got <- result{d, err} }()
	select {
	case r := <-got:
		if r.err != nil || string(r.data) != "name: f\n" {
			t.Fatalf("fifo: %q %v", r.data, r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("reading a FIFO with a writer did not finish in 10 s")
	}
}

func BenchmarkRefuseHostile(b *testing.B) {
	for _, bc := range []struct {
		name string
		data []byte
	}{
		{"alias-bomb-1MiB", aliasBomb(1 << 20)},
		{"flow-depth-1MiB", bytes.Repeat([]byte("["), 1<<20)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Load("bomb.yaml", bc.data); err == nil {
					b.Fatal("accepted")
				}
			}
		})
	}
}

// rulesPipeline is a valid pipeline with an n-rule filter in the block
// style people write by hand (more nodes per rule than the flow style).
func rulesPipeline(n int) []byte {
	var b bytes.Buffer
	b.WriteString("name: big\nstages:\n  - {name: parse, type: parse}\n  - name: acl\n    type: filter\n    default: accept\n    rules:\n")
	for i := range n {
		fmt.Fprintf(&b, "      - proto: tcp\n        src: 10.%d.%d.%d/32\n        dst_port: [%d, %d]\n        action: \"drop:r%d\"\n", i>>16&255, i>>8&255, i&255, 1+i%60000, 2+i%60000, i%8)
	}
	b.WriteString("  - {name: out, type: tx, port: sink}\n")
	return b.Bytes()
}

// TestLargeRealConfigsAreWithinTheLimits: a 100,000-rule filter is far
// from every limit.
func TestLargeRealConfigsAreWithinTheLimits(t *testing.T) {
	src := rulesPipeline(100_000)
	st, err := yamlbound.Check(src, ConfigLimits())
	if err != nil {
		t.Fatal(err)
	}
	if st.Nodes*2 > MaxConfigNodes || st.Depth*4 > MaxConfigDepth || len(src)*4 > MaxConfigBytes {
		t.Fatalf("a 100,000-rule pipeline (%d bytes, %+v) is within a factor of 2 of a limit", len(src), st)
	}
	s, err := Parse("big.yaml", src)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Stages) != 3 {
		t.Fatalf("stages = %d", len(s.Stages))
	}
	t.Logf("100,000 rules: %d bytes, %d nodes, depth %d", len(src), st.Nodes, st.Depth)
}

// TestErrorsEchoAShortPrefix: what a config says comes back quoted at
// most maxEcho bytes long, and a config with a million problems gets a
// bounded report that says how many there were.
func TestErrorsEchoAShortPrefix(t *testing.T) {
	key, long := strings.Repeat("k", 1000), strings.Repeat("v", 1<<20)
	_, err := Load("c.yaml", []byte("name: "+long+"\n"+key+": 1\nstages:\n  - {name: out, type: tx, port: "+long+"}\n  - {name: x, type: "+long+"}\n"))
	if err == nil {
		t.Fatal("accepted")
	}
	if len(err.Error()) > 2000 {
		t.Fatalf("error is %d bytes:\n%.500s", len(err.Error()), err)
	}
	for _, want := range []string{
		`c.yaml:1:7: invalid pipeline name "` + strings.Repeat("v", maxEcho) + `"...: want`,
		`c.yaml:2:1: unknown key "` + strings.Repeat("k", maxEcho) + `"... (known: name, settings, stages)`,
		`stage "x": unknown stage type "` + strings.Repeat("v", maxEcho) + `"... (known:`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %s:\n%.1500s", want, err)
		}
	}

	var b strings.Builder
	b.WriteString("name: p\nsettings:\n")
	for i := range 200_000 {
		fmt.Fprintf(&b, "  k%d: 1\n", i)
	}
	b.WriteString("stages:\n  - {name: out, type: tx, port: o}\n")
	var el *ErrorList
	_, d := heapCost(func() { _, err = Load("c.yaml", []byte(b.String())) })
	if !errors.As(err, &el) || el.Len() != 200_000 || len(el.Errs) != MaxKeptProblems {
		t.Fatalf("err = %T with %d problems (%d kept), want 200000 (%d kept)", err, el.Len(), len(el.Errs), MaxKeptProblems)
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != MaxListedProblems+1 || lines[len(lines)-1] != fmt.Sprintf("... and %d more problems (the first %d are listed)", 200_000-MaxListedProblems, MaxListedProblems) {
		t.Fatalf("report has %d lines, last %q", len(lines), lines[len(lines)-1])
	}
	t.Logf("200,000 unknown settings reported in %v", d)
}

// TestDuplicateKeysInAHugeMapping: the duplicate-key check is linear, so
// a mapping of 200,000 keys (a few of them twice) is checked at once.
func TestDuplicateKeysInAHugeMapping(t *testing.T) {
	var b strings.Builder
	b.WriteString("name: p\nstages:\n  - name: out\n    type: tx\n    port: o\n")
	for i := range 200_000 {
		fmt.Fprintf(&b, "    o%d: 1\n", i)
	}
	b.WriteString("    o7: 2\n")
	done := make(chan error, 1)
	go func() { _, err := Parse("c.yaml", []byte(b.String())); done <- err }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), `c.yaml:200006:5: stage "out": duplicate key "o7" (first at line 13)`) {
			t.Fatalf("err = %.500v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the duplicate-key check of a 200,000-key mapping did not finish in 30 s")
	}
}

func TestReadConfigFileIsBounded(t *testing.T) {
	_, err := LoadFile("/dev/zero")
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("larger than the limit of %d bytes", MaxConfigBytes)) {
		t.Fatalf("LoadFile(/dev/zero) = %v", err)
	}
}

// FuzzParseBounded: whatever the bytes, Parse stays within the limits it
// names: no panic, and what it accepts has no alias in its tree.
func FuzzParseBounded(f *testing.F) {
	f.Add(aliasBomb(600))
	f.Add([]byte("name: p\nstages:\n  - {name: out, type: tx, port: o}\n"))
	f.Add([]byte("name: p\nstages:\n  - parse: {}\n  - filter: {rules: [{action: drop}]}\n"))
	f.Add([]byte("[[[[[[[[]]]]]]]]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, _ := Parse("f.yaml", data)
		if s != nil && s.Root != nil && hasAlias(s.Root) {
			t.Fatalf("a tree with an alias got past the bounded reader:\n%q", data)
		}
	})
}

// TestSyntaxErrorInABigConfigIsCheap: a syntax error at the end of a big
// config is positioned without a second parser building a tree of the
// whole input (goccy took 410 MB for this 1 MB one).
func TestSyntaxErrorInABigConfigIsCheap(t *testing.T) {
	d := append(append([]byte("name: t\nstages: ["), bytes.Repeat([]byte("0,"), 500_000)...), "0\n  x: ]: [\n"...)
	var err error
	n, dur := heapCost(func() { _, err = Parse("b.yaml", d) })
	if err == nil || !strings.HasPrefix(err.Error(), "b.yaml:3:") || !strings.Contains(err.Error(), "yaml: ") {
		t.Fatalf("err = %.300v", err)
	}
	// yaml.v3's own tree of the 500,000 nodes before the error is what
	// a valid config of that size costs too (about 240 bytes a node).
	if n > 200<<20 {
		t.Fatalf("positioning the error allocated %d bytes", n)
	}
	t.Logf("%d bytes: %v, %d bytes allocated in %v", len(d), err, n, dur)
}
