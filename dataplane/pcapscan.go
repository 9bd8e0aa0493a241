package dataplane

import (
	"fmt"
	"io"

	"github.com/warpflow/warpflow/rings"
)

// Frame sizing. A frame holds one packet (plus headroom), so a capture of
// jumbo frames (9,000 bytes) or of GRO/TSO host traffic (up to 64 KiB) needs
// frames larger than the default 4 KiB. Replay sizes the arena for the
// capture: the smallest power of two from 4 KiB to 64 KiB that holds its
// longest packet after link-type normalisation plus the headroom.
//
// Where that length comes from depends on what the input is. A regular file
// whose header promises packets small enough for the default frames (its
// snap length) needs nothing more; otherwise (tcpdump's default snap length
// is 262144) it is read once ahead, on the same open file, which is then
// sought back to its start. Anything else (standard input, a pipe, a FIFO)
// is read exactly once, so its frames are sized from the snap length its
// headers declare (up to 64 KiB frames), or from --frame-size; a packet
// longer than a frame holds is an oversize input drop, counted, never
// truncated.
//
// The arena's memory stays about the default's 16 MiB (fewer, larger
// frames) when streaming. A preload gets one frame per packet, of the
// smallest size (from 2 KiB) that holds the capture's longest packet, up
// to preloadLimit bytes of frames; a capture that does not fit (or an
// input that cannot be read ahead) streams instead, and the replay says so.

// Arena sizing limits.
const (
	arenaBytes     = 16 << 20 // a streaming arena's size, whatever its frame size
	minArenaFrames = 256
	minFrameSize   = 2048  // rings.NewArena's smallest frame
	maxFrameSize   = 65536 // rings.NewArena's limit
)

// preloadLimit is the most memory a preloading arena takes (a variable
// only so that a test can lower it).
var preloadLimit = 4 << 30

// captureShape is what reading a capture ahead found.
type captureShape struct {
	records uint64 // records read before the end or the first error
	maxLen  int    // longest packet, after link-type normalisation
}

// scanCapture reads every record of the capture from rd (just opened) and
// returns its shape. A damaged record ends the scan quietly, with what
// came before: the replay itself reports it.
func scanCapture(rd *recordReader) captureShape {
	var s captureShape
	var hdr [ethHeaderLen]byte
	var rec record
	for {
		if err := scanNext(rd, &rec); err != nil {
			return s
		}
		s.records++
		if len(rec.data) == 0 {
			continue
		}
		hl, skip, ok := normalize(rec.kind, rec.data, &hdr)
		if n := hl + len(rec.data) - skip; ok && n > s.maxLen {
			s.maxLen = n
		}
	}
}

// scanNext is readInto with a panic in the capture reader made an error.
func scanNext(rd *recordReader, rec *record) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = rd.recovered(p)
		}
	}()
	return rd.readInto(rec)
}

// frameSizeFor returns the smallest frame size from from up to 64 KiB that
// holds a packet of n bytes after headroom, and the headroom, cut where a
// 64 KiB frame would otherwise not hold the packet.
func frameSizeFor(from, n, headroom int) (size, room int) {
	size = from
	for size < maxFrameSize && size-headroom < n {
		size *= 2
	}
	if size-headroom < n {
		headroom = max(size-n, 0)
	}
	return size, headroom
}

// arenaPlan is how a replay's arena is sized, and whether a preload that
// was asked for happens.
type arenaPlan struct {
	opts    rings.ArenaOptions
	preload bool
	note    string // one line for the user when the plan is not what was asked
}

// replayArena plans the arena for cfg's capture, read through rd (just
// opened on in). A scan, when one is needed, reads the capture to its end
// and rewinds rd to the start, so the replay reads it again from the same
// open file.
func replayArena(cfg ReplayConfig, rd *recordReader, in *captureInput) (arenaPlan, error) {
	plan := arenaPlan{preload: cfg.Replay.Preload}
	if cfg.Arena.Frames != 0 {
		plan.opts = cfg.Arena
		return plan, nil
	}
	o := rings.DefaultArenaOptions()
	seekable := in == nil || in.seekable
	if plan.preload && !seekable {
		if cfg.Replay.Loops > 1 || cfg.Replay.Loops == -1 {
			return plan, fmt.Errorf("replay %s: preload with loops needs a capture that can be read twice (a file), not a pipe: save it to a file first", rd.name)
		}
		plan.preload = false
		plan.note = fmt.Sprintf("preload: %s cannot be read ahead to size the frames; streaming it instead (the same packets and verdicts)", rd.name)
	}
	rewind := func() error {
		s, ok := rd.src.(io.Seeker)
		if !ok {
			return fmt.Errorf("capture %s: cannot seek back after sizing the frames", rd.name)
		}
		if _, err := s.Seek(0, io.SeekStart); err != nil {
			return fmt.Errorf("capture %s: seek back after sizing the frames: %w", rd.name, err)
		}
		return rd.rewind()
	}
	var shape captureShape
	scanned := false
	if cfg.FrameSize != 0 {
		if cfg.FrameSize < minFrameSize || cfg.FrameSize > maxFrameSize || cfg.FrameSize&(cfg.FrameSize-1) != 0 {
			return plan, fmt.Errorf("frame size %d: must be a power of two from %d to %d", cfg.FrameSize, minFrameSize, maxFrameSize)
		}
		o.FrameSize = cfg.FrameSize
		o.Headroom = min(o.Headroom, o.FrameSize/4)
	}
	switch {
	case plan.preload:
		shape, scanned = scanCapture(rd), true
		if cfg.FrameSize == 0 {
			o.FrameSize, o.Headroom = frameSizeFor(minFrameSize, shape.maxLen, o.Headroom)
		}
	case cfg.FrameSize != 0:
	case !seekable:
		// Read once: the headers' promise is all there is. The largest
		// synthetic header a link type adds is Ethernet's 14 bytes.
		// A snap length over 64 KiB keeps the headroom: packets longer
		// than a 64 KiB frame holds are then oversize drops.
		o.FrameSize, o.Headroom = frameSizeFor(o.FrameSize, min(rd.snapLen()+ethHeaderLen, maxFrameSize-o.Headroom), o.Headroom)
	case rd.ng || rd.snapLen()+ethHeaderLen > o.FrameSize-o.Headroom:
		shape, scanned = scanCapture(rd), true
		o.FrameSize, o.Headroom = frameSizeFor(o.FrameSize, shape.maxLen, o.Headroom)
	}
	if scanned {
		if err := rewind(); err != nil {
			return plan, err
		}
	}
	o.Frames = max(arenaBytes/o.FrameSize, minArenaFrames)
	if plan.preload {
		need := max(shape.records, 1)
		if m := uint64(cfg.Replay.MinFrames); m > need {
			need = (m + need - 1) / need * need // whole passes (see ReplayOptions.MinFrames)
		}
		if need*uint64(o.FrameSize) > uint64(preloadLimit) {
			plan.preload = false
			plan.note = fmt.Sprintf("preload: %d packets in frames of %d bytes need %s, more than the %s a preload may take; streaming instead (looped passes re-read the capture rather than replaying the frames as the pipeline left them)",
				need, o.FrameSize, byteSize(need*uint64(o.FrameSize)), byteSize(uint64(preloadLimit)))
			if cfg.FrameSize == 0 {
				o.FrameSize, o.Headroom = frameSizeFor(rings.DefaultArenaOptions().FrameSize, shape.maxLen, rings.DefaultArenaOptions().Headroom)
			}
			o.Frames = max(arenaBytes/o.FrameSize, minArenaFrames)
		} else {
			o.Frames = max(o.Frames, int(need))
		}
	}
	plan.opts = o
	return plan, nil
}

// byteSize writes n bytes for a person: 1.9 GiB, 512 MiB, 600 KiB, 12 bytes.
func byteSize(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}
