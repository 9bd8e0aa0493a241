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

// BenchmarkPageWalks separates the cost of a random address's
// translation from that of its line: lines read in a random order,
// dependent and independent as in BenchmarkRandomLines, from a 256 MiB
// region (huge pages, then the Go heap), few enough lines to stay in the
// caches. "512pages" is one line in each of 512 pages spread over the
// region: every translation stays in the TLB. "65536pages" is one line in
// each of 65536 4 KiB pages (the whole region): nearly none does.
// "65536packed" is as many lines, side by side in 4 MiB (1024 small
// pages, or two huge ones): the same lines' worth of cache, few pages.
// 65536pages against 65536packed is then a page walk's cost, the walk's
// own memory reads included. With the region on 2 MiB pages all three
// fit the TLB, unless the host maps the guest's memory in 4 KiB pages
// (BENCHMARKS.md, "An eleventh pass"):
//
//	go test -run '^$' -bench PageWalks -benchtime 4000000x ./internal/hugemem
func BenchmarkPageWalks(b *testing.B) {
	const region = 256 << 20
	for _, mem := range []string{"huge", "heap"} {
		var words []uint64
		var keep *Table[uint64]
		if mem == "huge" {
			keep = Alloc[uint64](region / 8)
			words = keep.S
		} else {
			words = make([]uint64, region/8)
		}
		for _, c := range []struct {
			name  string
			lines int
			apart int // bytes from one line to the next
		}{{"512pages", 512, region / 512}, {"65536pages", 65536, 4096}, {"65536packed", 65536, 64}} {
			at := make([]uint64, c.lines) // each line's word index
			for i := range at {
				off := i * c.apart
				if c.apart >= 4096 {
					off += i % 64 * 64 // a page offset of its own: the lines do not share cache sets
				}
				at[i] = uint64(off / 8)
			}
			perm := rand.Perm(c.lines)
			for i, l := range perm {
				words[at[l]] = at[perm[(i+1)%c.lines]]
			}
			order := make([]uint64, 1<<20)
			for i := range order {
				order[i] = at[rand.IntN(c.lines)] + 1
			}
			b.Run(fmt.Sprintf("%s/%s/dependent", mem, c.name), func(b *testing.B) {
				p := at[perm[0]]
				for range c.lines * 2 { // the lines into the caches
					p = words[p]
				}
				b.ResetTimer()
				for range b.N {
					p = words[p]
				}
				sink += p
			})
			b.Run(fmt.Sprintf("%s/%s/independent", mem, c.name), func(b *testing.B) {
				var s uint64
				for _, w := range order {
					s += words[w]
				}
				b.ResetTimer()
				i := 0
				for range b.N {
					s += words[order[i&(len(order)-1)]]
					i++
				}
				sink += s
			})
		}
		runtime.KeepAlive(keep)
	}
}
