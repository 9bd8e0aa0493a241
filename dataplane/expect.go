package dataplane

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gopacket/gopacket/pcapgo"
)

// CountersFile is the name of the deterministic counters a run writes beside
// its output captures, and that a golden directory holds.
const CountersFile = "counters.json"

// Deterministic returns the report without what depends on timing, on how
// packets were batched or on the executor (the timing block, the batch
// count, the frame places, the executor, each stage's calls and time), as
// it is written to counters.json and compared with goldens.
func (r Report) Deterministic() Report {
	r.Timing = Timing{}
	r.Batches, r.ExecutorFull, r.Frames, r.Executor = 0, 0, nil, nil
	stages := make([]StageReport, len(r.Stages))
	copy(stages, r.Stages)
	for i := range stages {
		stages[i].Calls, stages[i].Nanos = 0, 0
	}
	r.Stages = stages
	return r
}

// WriteCounters writes r's deterministic part to dir/counters.json.
func WriteCounters(dir string, r Report) error {
	data, err := json.MarshalIndent(r.Deterministic(), "", "  ")
	if err != nil {
		return fmt.Errorf("encode counters: %w", err)
	}
	data = append(data, '\n')
	if err := os.WriteFile(filepath.Join(dir, CountersFile), data, 0o644); err != nil {
		return fmt.Errorf("write counters: %w", err)
	}
	return nil
}

// Difference is the first way an output directory differs from a golden one.
type Difference struct {
	File   string // the file that differs, relative to the directories
	Packet int    // index of the first differing packet (-1 when not about a packet)
	Offset int    // first differing byte within that packet (-1 when lengths differ only)
	Detail string // what differs, for a person
}

func (d *Difference) String() string {
	if d.Packet < 0 {
		return fmt.Sprintf("%s: %s", d.File, d.Detail)
	}
	return fmt.Sprintf("%s: packet %d: %s", d.File, d.Packet, d.Detail)
}

// CompareDirs compares every .pcap and counters.json in want with the file
// of the same name in got, and reports files present on one side only. It
// returns nil when both directories hold the same outputs, or the first
// difference in file-name order.
func CompareDirs(got, want string) (*Difference, error) {
	wantFiles, err := outputFiles(want, "golden")
	if err != nil {
		return nil, err
	}
	gotFiles, err := outputFiles(got, "output")
	if err != nil {
		return nil, err
	}
	for _, name := range union(wantFiles, gotFiles) {
		inWant, inGot := slices.Contains(wantFiles, name), slices.Contains(gotFiles, name)
		switch {
		case !inGot:
			return &Difference{File: name, Packet: -1, Detail: "expected by the golden directory but not written"}, nil
		case !inWant:
			return &Difference{File: name, Packet: -1, Detail: "written but not in the golden directory"}, nil
		}
		var d *Difference
		if strings.HasSuffix(name, ".pcap") {
			d, err = comparePcaps(filepath.Join(got, name), filepath.Join(want, name))
		} else {
			d, err = compareText(filepath.Join(got, name), filepath.Join(want, name))
		}
		if err != nil || d != nil {
			if d != nil {
				d.File = name
			}
			return d, err
		}
	}
	return nil, nil
}

// outputFiles lists the files CompareDirs compares in dir, the side named
// side in errors.
func outputFiles(dir, side string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read %s directory: %w", side, err)
	}
	var names []string
	for _, e := range entries {
		if e.Type().IsRegular() && (strings.HasSuffix(e.Name(), ".pcap") || e.Name() == CountersFile) {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

// union returns the names in a or b, sorted, each once.
func union(a, b []string) []string {
	out := slices.Concat(a, b)
	slices.Sort(out)
	return slices.Compact(out)
}

func compareText(got, want string) (*Difference, error) {
	g, err := os.ReadFile(got)
	if err != nil {
		return nil, err
	}
	w, err := os.ReadFile(want)
	if err != nil {
		return nil, err
	}
	if bytes.Equal(g, w) {
		return nil, nil
	}
	gl, wl := strings.Split(string(g), "\n"), strings.Split(string(w), "\n")
	for i := 0; i < len(gl) || i < len(wl); i++ {
		var a, b string
		if i < len(gl) {
			a = gl[i]
		}
		if i < len(wl) {
			b = wl[i]
		}
		if a != b {
			return &Difference{Packet: -1, Detail: fmt.Sprintf("line %d: got %q, want %q", i+1, strings.TrimSpace(a), strings.TrimSpace(b))}, nil
		}
	}
	return &Difference{Packet: -1, Detail: "contents differ"}, nil
}

// comparePcaps compares two captures packet by packet (bytes and lengths;
// timestamps are ignored, since outputs number packets rather than time them).
func comparePcaps(got, want string) (*Difference, error) {
	gf, err := os.Open(got)
	if err != nil {
		return nil, err
	}
	defer gf.Close()
	wf, err := os.Open(want)
	if err != nil {
		return nil, err
	}
	defer wf.Close()
	gr, err := pcapgo.NewReader(gf)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", got, err)
	}
	wr, err := pcapgo.NewReader(wf)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", want, err)
	}
	if gr.LinkType() != wr.LinkType() {
		return &Difference{Packet: -1, Detail: fmt.Sprintf("link type %v, want %v", gr.LinkType(), wr.LinkType())}, nil
	}
	for i := 0; ; i++ {
		gd, _, gerr := gr.ReadPacketData()
		wd, _, werr := wr.ReadPacketData()
		gEOF, wEOF := errors.Is(gerr, io.EOF), errors.Is(werr, io.EOF)
		switch {
		case gEOF && wEOF:
			return nil, nil
		case gerr != nil && !gEOF:
			return nil, fmt.Errorf("read %s packet %d: %w", got, i, gerr)
		case werr != nil && !wEOF:
			return nil, fmt.Errorf("read %s packet %d: %w", want, i, werr)
		case gEOF:
			return &Difference{Packet: i, Offset: -1, Detail: "output ends here; the golden has more packets"}, nil
		case wEOF:
			return &Difference{Packet: i, Offset: -1, Detail: "output has more packets than the golden"}, nil
		}
		if bytes.Equal(gd, wd) {
			continue
		}
		off := 0
		for off < len(gd) && off < len(wd) && gd[off] == wd[off] {
			off++
		}
		d := &Difference{Packet: i, Offset: off}
		if off == len(gd) || off == len(wd) {
			d.Offset = -1
			d.Detail = fmt.Sprintf("length %d, want %d", len(gd), len(wd))
		} else {
			d.Detail = fmt.Sprintf("byte %d is 0x%02x, want 0x%02x (length %d, want %d)", off, gd[off], wd[off], len(gd), len(wd))
		}
		return d, nil
	}
}
