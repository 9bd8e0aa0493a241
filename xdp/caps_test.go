package xdp

import (
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/warpflow/warpflow/internal/testwait"
)

// withCaps runs f on an OS thread of its own whose effective, permitted
// and inheritable capabilities are exactly caps, and returns f's result.
// Capabilities are per thread in Linux and the bpf() syscall checks the
// calling thread's, so this is how a root test loads a program as a
// daemon holding only its unit's capabilities would. The thread is never
// unlocked: the runtime ends it with the goroutine, so the reduced
// credentials are never reused. t fails if f has not returned within
// testwait.Deadline.
func withCaps(t testing.TB, caps []uintptr, f func() error) error {
	t.Helper()
	res := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with us
		var data [2]unix.CapUserData
		for _, c := range caps {
			data[c/32].Effective |= 1 << (c % 32)
			data[c/32].Permitted |= 1 << (c % 32)
		}
		hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		if err := unix.Capset(&hdr, &data[0]); err != nil {
			res <- fmt.Errorf("capset: %w", err)
			return
		}
		var got [2]unix.CapUserData
		if err := unix.Capget(&hdr, &got[0]); err != nil || got != data {
			res <- fmt.Errorf("capget after capset: %+v, %v; want %+v", got, err, data)
			return
		}
		res <- f()
	}()
	return testwait.Recv(t, res, "a call on a thread with reduced capabilities", testwait.Deadline)
}

// TestProgramsLoadWithoutPerfmon: the XDP programs load with CAP_BPF and
// CAP_NET_ADMIN and without CAP_PERFMON or CAP_SYS_ADMIN, the
// capabilities the systemd unit gives. Without CAP_PERFMON the verifier
// refuses what it calls pointer leaks, among them pointer - pointer (the
// frame length as data_end - data): the program must work on pointer
// comparisons and offsets only.
func TestProgramsLoadWithoutPerfmon(t *testing.T) {
	requireRoot(t)
	specs := map[string]func() (*ebpf.CollectionSpec, error){
		"xsk_redirect": loadXskRedirect,
		"gen":          loadGen,
	}
	for name, load := range specs {
		t.Run(name, func(t *testing.T) {
			spec, err := load()
			if err != nil {
				t.Fatal(err)
			}
			err = withCaps(t, []uintptr{unix.CAP_BPF, unix.CAP_NET_ADMIN}, func() error {
				coll, err := ebpf.NewCollection(spec)
				if err != nil {
					return err
				}
				coll.Close()
				return nil
			})
			if err != nil {
				var ve *ebpf.VerifierError
				if errors.As(err, &ve) {
					t.Logf("verifier log:\n%+v", ve)
				}
				t.Fatalf("load with CAP_BPF and CAP_NET_ADMIN only: %v", err)
			}
		})
	}
	// The check can fail: without CAP_BPF the same load is refused.
	spec, err := loadXskRedirect()
	if err != nil {
		t.Fatal(err)
	}
	err = withCaps(t, []uintptr{unix.CAP_NET_ADMIN}, func() error {
		coll, err := ebpf.NewCollection(spec)
		if err == nil {
			coll.Close()
		}
		return err
	})
	if err == nil {
		t.Fatal("loaded without CAP_BPF: the thread's capabilities were not reduced")
	}
}

// BenchmarkProgram is the XDP program's cost per frame (BPF_PROG_TEST_RUN
// on a 64-byte IPv4/UDP frame, 100,000 runs a call): steering only, as
// the baseline, then with a kernel rule set loaded, for a frame a rule
// drops and one no rule matches (parsed in the kernel either way). The
// kernel half reads headers at variable offsets with bpf_xdp_load_bytes
// (so that it loads without CAP_PERFMON): its cost shows here.
func BenchmarkProgram(b *testing.B) {
	for _, bc := range []struct {
		name  string
		rules bool
		dport uint16
	}{{"steer", false, 9}, {"rules/drop", true, 9}, {"rules/nomatch", true, 5}} {
		b.Run(bc.name, func(b *testing.B) {
			p := loadedProgram(b)
			if bc.rules {
				if _, err := p.LoadRules(kernelRulesOf(b, "      - {proto: udp, dst_port: 9, action: \"drop:nine\"}\n      - {proto: udp, dst_port: 7, action: k}\n")); err != nil {
					b.Fatal(err)
				}
			}
			f := udp4Frame(bc.dport)
			const repeat = 100000
			b.ReportAllocs()
			b.ResetTimer()
			var total time.Duration
			for range b.N {
				_, d, err := p.objs.XskRedirect.Benchmark(f, repeat, nil)
				if err != nil {
					b.Fatal(err)
				}
				total += d * repeat // Benchmark reports the time per run
			}
			ns := float64(total.Nanoseconds()) / float64(b.N*repeat)
			b.ReportMetric(ns, "ns/frame")
			b.ReportMetric(1e3/ns, "Mpps")
		})
	}
}

// TestSteerOnlyWithoutRuleHelpers: on a kernel without the helpers the
// kernel rules read frames with (before 5.18; here the probe's answer is
// forced), the program is loaded steering only: it still loads without
// CAP_PERFMON, LoadRules refuses a rule set with ErrNotSupported, and a
// rule set in its maps all the same decides nothing (the kernel_rules
// constant makes that code dead).
func TestSteerOnlyWithoutRuleHelpers(t *testing.T) {
	requireRoot(t)
	inNewNetns(t)
	var p *Program
	err := withCaps(t, []uintptr{unix.CAP_BPF, unix.CAP_NET_ADMIN}, func() (err error) {
		p, err = loadProgram(ProgramOptions{Interface: "lo", Attach: AttachGeneric, Queues: 1}, wrapNotSupported("test: no helpers"))
		return err
	})
	if err != nil {
		t.Fatalf("load steering only with CAP_BPF and CAP_NET_ADMIN: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	drop9 := kernelRulesOf(t, "      - {proto: udp, dst_port: 9, action: \"drop:nine\"}\n")
	if _, err := p.LoadRules(drop9); !errors.Is(err, ErrNotSupported) {
		t.Fatalf("LoadRules on a steering-only program: %v, want ErrNotSupported", err)
	}
	if _, err := p.LoadRules(nil); err != nil {
		t.Errorf("LoadRules(nil) on a steering-only program: %v", err)
	}
	p.rulesErr = nil // write the set into the maps regardless
	if _, err := p.LoadRules(drop9); err != nil {
		t.Fatal(err)
	}
	if ret := runFrame(t, p, udp4Frame(9)); ret != xdpPass {
		t.Errorf("steering-only program with a rule set in its maps: action %d, want XDP_PASS (no socket)", ret)
	}
	if c, _ := p.Counters(0); c.Dropped != 0 || c.NoSocket != 1 {
		t.Errorf("counters %+v, want the frame steered (no socket), nothing dropped", c)
	}
}
