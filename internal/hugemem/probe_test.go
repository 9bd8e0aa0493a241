package hugemem

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
)

// BenchmarkRandomLines measures what a random cache line costs on this
// machine, the quantity a flow table of a million entries is bound by:
// one 8-byte word per 64-byte line read in a random order over 16 and
// 256 MiB, from huge pages (Alloc) and from the Go heap, dependent (each
// address from the load before: the latency) and independent (the
// addresses known ahead: as many misses in flight as the core and the
// page walks allow, the throughput a prefetching lookup can reach). It
// prints ns per line. BENCHMARKS.md ("A tenth pass") compares machines
// with it:
//
//	go test -run '^$' -bench RandomLines -benchtime 2000000x ./internal/hugemem
func BenchmarkRandomLines(b *testing.B) {
	for _, mib := range []int{16, 256} { // both over Alloc's 4 MiB: mapped
		for _, mem := range []string{"huge", "heap"} {
			lines := mib << 20 / 64
			var words []uint64
			var keep *Table[uint64]
			if mem == "huge" {
				keep = Alloc[uint64](lines * 8)
				words = keep.S
			} else {
				words = make([]uint64, lines*8)
			}
			// A random cycle through every line (dependent), and a random
			// sequence of lines (independent).
			perm := rand.Perm(lines)
			for i, l := range perm {
				words[l*8] = uint64(perm[(i+1)%lines])
			}
			order := make([]uint32, 1<<20)
			for i := range order {
				order[i] = uint32(rand.IntN(lines))
			}
			b.Run(fmt.Sprintf("%dMiB/%s/dependent", mib, mem), func(b *testing.B) {
				p := uint64(perm[0])
				for range b.N {
					p = words[p*8]
				}
				sink += p
			})
			b.Run(fmt.Sprintf("%dMiB/%s/independent", mib, mem), func(b *testing.B) {
				var s uint64
				i := 0
				for range b.N {
					s += words[uint64(order[i&(len(order)-1)])*8+1]
					i++
				}
				sink += s
			})
			runtime.KeepAlive(keep) // the mapping lives until both have run
		}
	}
}

var sink uint64
