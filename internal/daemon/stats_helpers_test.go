package daemon_test

import "github.com/warpflow/warpflow/internal/control"

// Helpers that read control.Stats the way the live tests compare them.

// dropped is every packet dropped for reason: by the workers and the
// engine, and by the XDP program's kernel rules.
func dropped(c control.Counts, reason string) uint64 {
	w, x := c.Drop(reason)
	return w + x
}

// stageCounter is stage's own counter text (control.CounterRow.Text:
// "total", "rule=0", "proto=udp") in s, summed over the queues; 0 when
// absent.
func stageCounter(s control.Stats, stage, text string) uint64 {
	st := s.Stage(stage)
	if st == nil {
		return 0
	}
	for _, c := range control.TopCounters(st.Counters, -1) {
		if c.Text == text {
			return c.Value
		}
	}
	return 0
}

// sampleCounts is a sample stage's candidates (the packets that reached
// it) and kept packets in s, summed over the queues.
func sampleCounts(s control.Stats, stage string) (candidates, kept uint64) {
	st := s.Stage(stage)
	if st == nil {
		return 0, 0
	}
	return st.Packets, stageCounter(s, stage, "kept")
}
