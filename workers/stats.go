package workers

// WorkerStats are one worker's counters since the pool started.
type WorkerStats struct {
	Batches uint64 // batches processed
	Packets uint64 // descriptors in those batches
	Spins   uint64 // idle polls without yielding
	Yields  uint64 // idle polls after runtime.Gosched
	Parks   uint64 // times the worker parked
}

// Stats is a snapshot of a pool's counters.
type Stats struct {
	Workers []WorkerStats // indexed like the kernels given to NewPool
}

// Total sums the workers' counters.
func (s Stats) Total() WorkerStats {
	var t WorkerStats
	for _, w := range s.Workers {
		t.Batches += w.Batches
		t.Packets += w.Packets
		t.Spins += w.Spins
		t.Yields += w.Yields
		t.Parks += w.Parks
	}
	return t
}

// Stats returns the workers' counters, read with atomic loads: cheap, never
// blocks the workers, and each counter is exact as of its own load. Idle
// spins and yields are published at the end of each idle episode (work
// found, park or exit), so they lag by at most one episode.
func (p *Pool) Stats() Stats {
	s := Stats{Workers: make([]WorkerStats, len(p.workers))}
	for i, w := range p.workers {
		s.Workers[i] = WorkerStats{
			Batches: w.batches.Load(),
			Packets: w.packets.Load(),
			Spins:   w.spins.Load(),
			Yields:  w.yields.Load(),
			Parks:   w.parks.Load(),
		}
	}
	return s
}
