package bench

import (
	"os"
	"runtime"
	"strconv"
	"testing"
)

// BenchmarkStatefulOnce runs the stateful row (or, with ICOUNT_BASE set,
// its baseline) once, unpinned, over ICOUNT_FLOWS flows (default 4096)
// and ICOUNT_STEADY measured packets (default 100 000). It exists for
// scripts/icount, which runs it under callgrind at two packet counts and
// takes the difference: the steady phase's instructions per packet,
// deterministic on any machine, where the wall clock of a shared VM is
// not. As a benchmark it never runs in go test's default pass.
func BenchmarkStatefulOnce(b *testing.B) {
	flows, steady := envUint(b, "ICOUNT_FLOWS", 4096), envUint(b, "ICOUNT_STEADY", 100_000)
	config := statefulPipeline
	if os.Getenv("ICOUNT_BASE") != "" {
		config = statefulBasePipeline()
	}
	// STATEFUL_GEN_CPU: the NIC thread's core (nicgen.go); unset, the
	// row's own core writes the packets, as scripts/icount needs (one
	// thread, deterministic).
	gen := -1
	if s := os.Getenv("STATEFUL_GEN_CPU"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil {
			b.Fatalf("STATEFUL_GEN_CPU=%q: want a CPU number", s)
		}
		gen = v
	}
	for b.Loop() {
		run := func() (Row, error) { return statefulRow(config, flows, steady, gen) }
		var r Row
		var err error
		if gen >= 0 {
			// Two threads: the row's pinned (to the last CPU, or
			// STATEFUL_CPU), so that it never shares the generator's.
			cpu := runtime.NumCPU() - 1
			if s := os.Getenv("STATEFUL_CPU"); s != "" {
				if cpu, err = strconv.Atoi(s); err != nil {
					b.Fatalf("STATEFUL_CPU=%q: want a CPU number", s)
				}
			}
			r, err = onCPU(cpu, run)
		} else {
			r, err = run()
		}
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(r.NsPerPacket, "ns/packet")
		if gen >= 0 {
			b.ReportMetric(100*r.GeneratorWaits, "%waits")
		}
	}
}

func envUint(b *testing.B, name string, def uint64) uint64 {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil || v == 0 {
		b.Fatalf("%s=%q: want a positive integer", name, s)
	}
	return v
}
