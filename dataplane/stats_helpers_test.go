package dataplane

// Helpers that read an Engine's Stats the way the tests compare them.

// frames is where e's frames are (Stats' account).
func (e *Engine) frames() FrameAccount { return *e.Stats().Frames }

// counter returns stage's own counter named text (counters.Group.Text:
// "total", "rule=0") in s, and whether s has it.
func (s *Stats) counter(stage, text string) (uint64, bool) {
	for _, st := range s.Stages {
		if st.Name != stage {
			continue
		}
		for _, g := range st.Counters {
			for _, kv := range g.Values {
				if g.Text(kv) == text {
					return kv.Value, true
				}
			}
		}
	}
	return 0, false
}

// stageCounter is stage's counter text in e's Stats (0 when absent).
func (e *Engine) stageCounter(stage, text string) uint64 {
	s := e.Stats()
	n, _ := s.counter(stage, text)
	return n
}

// sampleView is one sample stage as the tests compare them: the packets
// that reached it and those it kept.
type sampleView struct {
	Stage, File         string
	Candidates, Written uint64
}

// samples lists s's sample stages.
func (s *Stats) samples() []sampleView {
	var out []sampleView
	for _, st := range s.Stages {
		if st.File != "" {
			kept, _ := s.counter(st.Name, "kept")
			out = append(out, sampleView{Stage: st.Name, File: st.File, Candidates: st.Packets, Written: kept})
		}
	}
	return out
}

// statsSamples is e's sample stages now.
func (e *Engine) statsSamples() []sampleView {
	s := e.Stats()
	return s.samples()
}
