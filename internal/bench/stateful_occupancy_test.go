package bench

import (
	"fmt"
	"runtime"
	"testing"
)

// BenchmarkStatefulOccupancy runs the stateful row and its baseline with
// fewer concurrent flows than the million of the row (the table keeps its
// million slots): at 4096 flows the flows' entries and index lines stay
// in the caches, so the row's cost there is the work alone, and the rise
// towards a million flows is what the table's cache misses add.
// Alternating (base, stateful, ...) like BenchmarkStatefulRows, each run
// printed:
//
//	go test -run '^$' -bench StatefulOccupancy -benchtime 3x ./internal/bench
func BenchmarkStatefulOccupancy(b *testing.B) {
	cpu := runtime.NumCPU() - 1
	for _, flows := range []uint64{4096, 65536, StatefulFlows} {
		b.Run(fmt.Sprintf("flows=%d", flows), func(b *testing.B) {
			var base, st []float64
			for b.Loop() {
				for _, c := range []struct {
					name, config string
					to           *[]float64
				}{{"base", statefulBasePipeline(), &base}, {"stateful", statefulPipeline, &st}} {
					r, err := onCPU(cpu, func() (Row, error) { return statefulRow(c.config, flows, 20_000_000, DefaultGeneratorCPU(cpu)) })
					if err != nil {
						b.Fatal(err)
					}
					*c.to = append(*c.to, r.NsPerPacket)
					b.Logf("%-8s %d flows: %.2f Mpps %.1f ns/packet (%.1f ns of CPU) allocs %d", c.name, flows, r.Mpps, r.NsPerPacket, r.CPUNsPerPacket, r.Allocs)
				}
			}
			b.ReportMetric(medianOf(base), "base-ns/packet")
			b.ReportMetric(medianOf(st), "stateful-ns/packet")
		})
	}
}
