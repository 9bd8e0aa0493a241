package dataplane

import (
	"bytes"
	"fmt"
	"io"
	"os"

	"github.com/warpflow/warpflow/rings"
)

// Frame sizing. A frame holds one packet (plus headroom), so a capture of
// jumbo frames (9,000 bytes) or of GRO/TSO host traffic (up to 64 KiB) needs
// frames larger than the default 4 KiB. Replay sizes the arena for the
// capture: the smallest power of two from 4 KiB to 64 KiB that holds its
// longest packet after link-type normalisation plus the headroom. It knows
// that length from the file header when the snap length is small enough
// for the default frames; otherwise (tcpdump's default snap length is
// 262144) it reads the capture once ahead, as it must anyway to preload.
// The arena's memory stays about the default's 16 MiB (fewer, larger
// frames) when streaming; a preload gets a frame per packet, up to 1 GiB.

// Arena sizing limits.
const (
	arenaBytes      = 16 << 20 // a streaming arena's size, whatever its frame size
	maxPreloadBytes = 1 << 30  // a preloading arena's largest size
	minArenaFrames  = 256
	maxFrameSize    = 65536 // rings.NewArena's limit
)

// captureShape is what reading a capture ahead found.
type captureShape struct {
	records uint64 // records read before the end or the first error
	maxLen  int    // longest packet, after link-type normalisation
}

// scanCapture reads every record of the capture and returns its shape. A
// damaged record ends the scan quietly, with what came before: the replay
// itself reports it. An error is returned only for a capture that cannot be
// opened at all.
func scanCapture(name string, src io.Reader) (captureShape, error) {
	var s captureShape
	rd, err := newRecordReader(name, src)
	if err != nil {
		return s, err
	}
	var hdr [ethHeaderLen]byte
	var rec record
	for {
		if err := scanNext(rd, &rec); err != nil {
			return s, nil
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

// snaplenFits reports whether the capture's file header promises packets
// that fit frames of the given options (a pcap file whose snap length is
// small enough), so that no scan is needed.
func snaplenFits(name string, src io.Reader, o rings.ArenaOptions) bool {
	rd, err := newRecordReader(name, src)
	if err != nil || rd.pcap == nil {
		return false
	}
	// The largest synthetic header a link type adds is Ethernet's 14 bytes.
	return int(rd.pcap.Snaplen())+ethHeaderLen <= o.FrameSize-o.Headroom
}

// frameSizeFor returns the smallest frame size from the default up to
// 64 KiB that holds a packet of n bytes after headroom, and the headroom,
// cut where a 64 KiB frame would otherwise not hold the packet.
func frameSizeFor(n, headroom int) (size, room int) {
	size = rings.DefaultArenaOptions().FrameSize
	for size < maxFrameSize && size-headroom < n {
		size *= 2
	}
	if size-headroom < n {
		headroom = max(size-n, 0)
	}
	return size, headroom
}

// replayArena picks the arena options for cfg: cfg.Arena when set,
// otherwise frames sized for the capture (see above), or of cfg.FrameSize
// when it is set.
func replayArena(cfg ReplayConfig) (rings.ArenaOptions, error) {
	if cfg.Arena.Frames != 0 {
		return cfg.Arena, nil
	}
	o := rings.DefaultArenaOptions()
	open := func() (io.Reader, func(), error) {
		if cfg.CaptureData != nil {
			return bytes.NewReader(cfg.CaptureData), func() {}, nil
		}
		f, err := os.Open(cfg.Capture)
		if err != nil {
			return nil, nil, fmt.Errorf("open capture: %w", err)
		}
		return f, func() { f.Close() }, nil
	}
	var shape captureShape
	switch {
	case cfg.FrameSize != 0:
		if cfg.FrameSize < 2048 || cfg.FrameSize > maxFrameSize || cfg.FrameSize&(cfg.FrameSize-1) != 0 {
			return o, fmt.Errorf("frame size %d: must be a power of two from 2048 to %d", cfg.FrameSize, maxFrameSize)
		}
		o.FrameSize = cfg.FrameSize
		o.Headroom = min(o.Headroom, o.FrameSize/4)
		if cfg.Replay.Preload {
			src, done, err := open()
			if err != nil {
				return o, err
			}
			shape, err = scanCapture(cfg.Capture, src)
			done()
			if err != nil {
				return o, err
			}
		}
	default:
		src, done, err := open()
		if err != nil {
			return o, err
		}
		fits := !cfg.Replay.Preload && snaplenFits(cfg.Capture, src, o)
		done()
		if !fits {
			if src, done, err = open(); err != nil {
				return o, err
			}
			shape, err = scanCapture(cfg.Capture, src)
			done()
			if err != nil {
				return o, err
			}
			o.FrameSize, o.Headroom = frameSizeFor(shape.maxLen, o.Headroom)
		}
	}
	o.Frames = max(arenaBytes/o.FrameSize, minArenaFrames)
	if cfg.Replay.Preload {
		need := max(int(min(shape.records, uint64(maxPreloadBytes/o.FrameSize))), cfg.Replay.MinFrames)
		o.Frames = max(o.Frames, need)
	}
	return o, nil
}
