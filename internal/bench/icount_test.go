package bench

import (
	"os"
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
	for b.Loop() {
		r, err := statefulRow(config, flows, steady)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(r.NsPerPacket, "ns/packet")
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
