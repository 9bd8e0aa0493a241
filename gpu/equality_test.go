package gpu

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/warpflow/warpflow/dataplane"
	"github.com/warpflow/warpflow/internal/benchshape"
	"github.com/warpflow/warpflow/pipelines"
	"github.com/warpflow/warpflow/rings"
	"github.com/warpflow/warpflow/workers"
)

// captures returns every capture in testdata (the captures, the real-world
// and link-type ones, the broken ones) and in the corpus:
// $WARPFLOW_CORPUS when set, else the repository's testdata/corpus.
func captures(t *testing.T) []string {
	t.Helper()
	var files []string
	for _, g := range []string{"*.pcap", "realworld/*.pcap", "linktypes/*.pcap", "linktypes/*.pcapng", "bad/*.pcap"} {
		m, _ := filepath.Glob(filepath.Join("../testdata/captures", g))
		files = append(files, m...)
	}
	if len(files) < 20 {
		t.Fatalf("only %d captures in ../testdata/captures", len(files))
	}
	dir := os.Getenv("WARPFLOW_CORPUS")
	if dir == "" {
		dir = "../testdata/corpus"
	}
	corpus, _ := filepath.Glob(filepath.Join(dir, "*.pcap"))
	if len(corpus) == 0 {
		t.Fatalf("no corpus in %s", dir)
	}
	return append(files, corpus...)
}

// tuples returns IPv4 (source prefix, destination port) rule texts drawn
// from the captures' own traffic, so that rules of a generated ACL hit.
func tuples(t *testing.T, files []string, rnd *rand.Rand) []string {
	t.Helper()
	var out []string
	for _, f := range files {
		a, err := rings.NewArena(rings.ArenaOptions{Frames: 512, FrameSize: 4096, Headroom: 256})
		if err != nil {
			t.Fatal(err)
		}
		p, err := dataplane.OpenReplay(f, a, dataplane.DefaultReplayOptions())
		if err != nil {
			continue
		}
		b := rings.NewBatch(256, a)
		for {
			b.Clear()
			k, err := p.Receive(b)
			for i := range k {
				var key pipelines.FilterKey
				pipelines.FilterKeyOfPacket(b.Packet(i), true, &key)
				if key[0]>>9 == 1 && rnd.IntN(3) == 0 {
					s := key[1] >> 32
					src := netip.AddrFrom4([4]byte{byte(s >> 24), byte(s >> 16), byte(s >> 8), byte(s)})
					r := fmt.Sprintf("{src: %s/%d", src, []int{32, 24, 16}[rnd.IntN(3)])
					if key[6] != 65536 {
						r += fmt.Sprintf(", dst_port: %d", key[6])
					}
					out = append(out, r)
				}
			}
			p.Recycle(b.Descs)
			if err != nil || k == 0 {
				break
			}
		}
		p.Close()
	}
	return out
}

// aclYAML writes a pipeline of n filter rules drawn from the captures'
// traffic, mixed with wildcard, VLAN, class, flag and IPv6 rules, whose
// default spreads packets over two branches by flow (balance), each with
// a sampler (one every 7th, the first 40), one counting.
func aclYAML(t *testing.T, n int, files []string, seed uint64) string {
	t.Helper()
	rnd := rand.New(rand.NewPCG(seed, 1))
	tu := tuples(t, files, rnd)
	actions := []string{"accept", `"drop:acl"`, "web", "kernel", "spread"}
	var sb strings.Builder
	sb.WriteString("name: acl\nsettings: {batch_size: 128}\nstages:\n  - {name: parse, type: parse}\n  - name: acl\n    type: filter\n    default: spread\n    rules:\n")
	fixed := []string{
		"{class: malformed, action: \"drop:malformed\"}",
		"{proto: tcp, dst_port: 23, action: \"drop:telnet\"}",
		"{vlan: [1-100], tcp_flags: \"syn,!ack\", action: web}",
		"{src: [2001:db8::/32, fe80::/10], action: kernel}",
		"{proto: [icmp, icmpv6], action: kernel}",
		"{fragment: true, action: \"drop:frag\"}",
		"{proto: udp, dst_port: [53, 5353, 67-68], action: spread}",
	}
	for i := 0; i < n; i++ {
		var r string
		switch {
		case i < len(fixed):
			r = fixed[i]
		case len(tu) > 0 && rnd.IntN(2) == 0:
			r = tu[rnd.IntN(len(tu))] + ", action: " + actions[rnd.IntN(len(actions))] + "}"
		default:
			r = fmt.Sprintf("{src: 10.%d.%d.0/24, dst_port: %d, action: %s}", rnd.IntN(256), rnd.IntN(256), 1+rnd.IntN(65535), actions[rnd.IntN(len(actions))])
		}
		sb.WriteString("      - " + r + "\n")
	}
	sb.WriteString(`  - {name: spread, type: balance, to: [left, right, "drop:balanced"]}
  - {name: left, type: sample, every: 7, file: left.pcap, next: lcount}
  - {name: lcount, type: count, by: [protocol, class], next: web}
  - {name: right, type: sample, first: 40, file: right.pcap, next: web1}
  - {name: web1, type: tx, port: web1}
  - {name: web, type: tx, port: web0}
  - {name: kernel, type: pass}
`)
	return sb.String()
}

// equalityPipelines are the four pipelines the device must run exactly
// as the CPU does: the default pipeline, the bench's default shape, a NAT
// pipeline (NAT, TTL, MACs, VLAN tags popped and pushed) and a
// 10 000-rule ACL with balance and two samplers. Together they use every
// stage kind the device runs.
func equalityPipelines(t *testing.T, files []string) []*pipelines.Graph {
	t.Helper()
	load := func(name string, src []byte) *pipelines.Graph {
		g, err := pipelines.Load(name, src)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return g
	}
	def, err := os.ReadFile("../testdata/pipelines/valid/default.yaml")
	if err != nil {
		t.Fatal(err)
	}
	nat, err := os.ReadFile("testdata/nat.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return []*pipelines.Graph{
		load("default.yaml", def),
		load("shape.yaml", []byte(benchshape.Default("shape", 1000))),
		load("nat.yaml", nat),
		load("acl.yaml", []byte(aclYAML(t, 10000, files, 5))),
	}
}

// replayOnce replays file through g, on CPU workers or through mk's
// executor, into outDir, and returns the report with what depends on
// batching and time zeroed.
func replayOnce(g *pipelines.Graph, file, outDir string, mk func(dataplane.ExecutorConfig) (workers.Executor, error)) (dataplane.Report, error) {
	eo := dataplane.DefaultOptions()
	eo.Timing = false
	eo.Workers = 1
	eo.TrackFrames = true
	eo.NewExecutor = mk
	rep, err := dataplane.Replay(dataplane.ReplayConfig{Capture: file, Graph: g, Engine: eo, OutDir: outDir})
	return rep.Deterministic(), err
}

// pcaps returns the capture files an output directory holds, by name.
func pcaps(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	m, _ := filepath.Glob(filepath.Join(dir, "*.pcap"))
	for _, f := range m {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out[filepath.Base(f)] = b
	}
	return out
}

// eqTotals sums what went through the executors of an equality run.
type eqTotals struct{ packets, fallbacks, files uint64 }

// runEquality replays every capture through every equality pipeline on
// the CPU and through the CUDA executor (kernel.cu's code on the host or
// on the GPU), and requires identical reports (verdicts, ports, reasons,
// every stage's packets, bytes, edges and own counters, samples) and
// byte-identical output captures (every tx port, pass.pcap, the sample
// files), and that the device ran most packets itself.
func runEquality(t *testing.T, o Options) {
	files := captures(t)
	graphs := equalityPipelines(t, files)
	// A kernel per replay (the executor opens it and its Close closes it:
	// frame memory stays registered until its kernel closes), small.
	o.Rings, o.Slots = 2, 16
	for _, g := range graphs {
		var tot eqTotals
		var last *Executor
		mk := func(cfg dataplane.ExecutorConfig) (workers.Executor, error) {
			ex, err := NewExecutor(ExecutorOptions{Kernel: o})(cfg)
			if err == nil {
				last = ex.(*Executor)
			}
			return ex, err
		}
		for _, f := range files {
			name := filepath.Base(f)
			cdir, gdir := t.TempDir(), t.TempDir()
			cpu, cerr := replayOnce(g, f, cdir, nil)
			last = nil
			gpu, gerr := replayOnce(g, f, gdir, mk)
			if last != nil {
				s := last.Stats()
				tot.packets += s.Packets
				tot.fallbacks += s.Fallbacks
			}
			if fmt.Sprint(cerr) != fmt.Sprint(gerr) {
				t.Fatalf("%s through %s: CPU error %v, CUDA executor error %v", name, g.Name(), cerr, gerr)
			}
			if !reflect.DeepEqual(cpu, gpu) {
				t.Fatalf("%s through %s: reports differ\nCPU  %+v\nCUDA %+v", name, g.Name(), cpu, gpu)
			}
			cp, gp := pcaps(t, cdir), pcaps(t, gdir)
			if len(cp) != len(gp) {
				t.Fatalf("%s through %s: CPU wrote %v, CUDA executor %v", name, g.Name(), keys(cp), keys(gp))
			}
			for file, want := range cp {
				if !bytes.Equal(want, gp[file]) {
					t.Fatalf("%s through %s: %s differs (%d bytes on the CPU, %d through the CUDA executor)", name, g.Name(), file, len(want), len(gp[file]))
				}
			}
			tot.files++
		}
		t.Logf("%s: %d captures, %d packets through the executor, %d (%.1f%%) handed back to the CPU path, 0 mismatches",
			g.Name(), tot.files, tot.packets, tot.fallbacks, 100*float64(tot.fallbacks)/float64(max(tot.packets, 1)))
		if tot.packets == 0 || tot.fallbacks*2 > tot.packets {
			t.Errorf("%s: the device ran too few packets itself (%d of %d handed back)", g.Name(), tot.fallbacks, tot.packets)
		}
	}
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestEqualityEmulated: kernel.cu's own parser, classifier and stages,
// built for the host, give the CPU path's verdicts, counters and output
// bytes for every test capture through the four pipelines (CI).
func TestEqualityEmulated(t *testing.T) { runEquality(t, emulated(t)) }

// TestEqualityCUDA is the same on the GPU (skipped, with the reason,
// without one).
func TestEqualityCUDA(t *testing.T) { runEquality(t, onDevice(t)) }
