package daemon

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
	"github.com/warpflow/warpflow/dataplane"
	"github.com/warpflow/warpflow/internal/control"
	"github.com/warpflow/warpflow/internal/trust"
	"github.com/warpflow/warpflow/pipelines"
	"github.com/warpflow/warpflow/rings"
)

// Sample stages: the engine picks the packets a sample stage keeps (in
// receive order) and hands them to the stage's sink, an output that only
// borrows the frames (dataplane.Outputs.Samples). The daemon's sink copies
// each packet into a ring of its own, one per queue, on the queue's I/O
// loop (one copy per kept packet, no lock, no allocation; a full ring
// counts the packet as missed: the data path never waits for the disk),
// and a goroutine writes the rings to a pcap every sampleFlush.
//
// The file is the stage's file name in the samples directory under
// capture_dir (capture_dir/samples: a room of its own, so a sample file
// can never take a name a client gave a capture), made beneath it like a
// capture (trust.Room). It is bounded: at sample_max_bytes the writer
// moves it to NAME.1 (replacing the one before) and starts NAME again, so
// a sample stage keeps at most two files; a file left by an earlier run
// is moved to NAME.1 the same way when the daemon opens NAME. A sink
// lives as long as the daemon: pipelines swapped to and back write on
// into the same file.

// sampleDir is the samples' room, under capture_dir.
const sampleDir = "samples"

// sampleFlush is how often the writer drains the rings; sampleSlots is
// each ring's size, in packets of at most the UMEM's frame size: at the
// writer's cadence, some 25,000 kept packets a second per queue.
const (
	sampleFlush = 20 * time.Millisecond
	sampleSlots = 512
)

// MaxSampleFiles is how many sample files the daemon writes at most. A
// sink lives as long as the daemon (pipelines swapped away and back write
// on into the same file), and each holds a ring per queue and up to two
// files of sample_max_bytes, so without a bound a client loading
// pipelines with ever new sample file names would grow the daemon's
// memory and disk without end. A load or swap that needs more is refused.
const MaxSampleFiles = 32

// DefaultSampleMaxBytes is sample_max_bytes unless configured otherwise.
const DefaultSampleMaxBytes = 64 << 20

// sampleFiles is the daemon's sample sinks, by file name.
type sampleFiles struct {
	mu    sync.Mutex
	sinks map[string]*sampleSink
	order []string // file names, in the order they were opened
}

// outputs returns the sample sinks queue qi's engine writes graph g's
// samples to, opening the files g's samplers name that are not open yet.
// It fails, having opened nothing, when the room or a file cannot be made.
func (d *Daemon) sampleOutputs(g *pipelines.Graph, qi int) (map[string]dataplane.Port, error) {
	ss := g.Samplers()
	if len(ss) == 0 {
		return nil, nil
	}
	sf := &d.samples
	sf.mu.Lock()
	defer sf.mu.Unlock()
	if sf.sinks == nil {
		sf.sinks = map[string]*sampleSink{}
	}
	need := map[string]bool{}
	for _, s := range ss {
		if sf.sinks[s.File] == nil {
			need[s.File] = true
		}
	}
	if n := len(sf.sinks) + len(need); n > MaxSampleFiles {
		return nil, fmt.Errorf("pipeline %q needs %d new sample files beside the %d the daemon writes: it writes at most %d (they stay open until it stops; reuse a file name)", g.Name(), len(need), len(sf.sinks), MaxSampleFiles)
	}
	var made []*sampleSink
	for _, s := range ss {
		if sf.sinks[s.File] != nil {
			continue
		}
		sk, err := d.openSample(s)
		if err != nil {
			for _, m := range made {
				m.close()
				delete(sf.sinks, m.name)
			}
			return nil, fmt.Errorf("sample stage %q: %w", s.Stage, err)
		}
		sf.sinks[s.File] = sk
		made = append(made, sk)
	}
	for _, m := range made {
		sf.order = append(sf.order, m.name)
		go m.run(d.log)
	}
	out := map[string]dataplane.Port{}
	for _, s := range ss {
		out[s.File] = sf.sinks[s.File].forQueue(qi, d.cfg.UMEM.FrameSize)
	}
	return out, nil
}

// sampleRoom opens capture_dir/samples.
func (d *Daemon) sampleRoom() (*trust.Room, error) {
	return d.room(filepath.Join(d.cfg.CaptureDir, sampleDir))
}

// openSample makes s's file (moving one an earlier run left to NAME.1).
func (d *Daemon) openSample(s pipelines.SamplerInfo) (*sampleSink, error) {
	room, err := d.sampleRoom()
	if err != nil {
		return nil, fmt.Errorf("samples directory: %w", err)
	}
	sk := &sampleSink{stage: s.Stage, name: s.File, room: room, max: d.cfg.SampleMaxBytes, stop: make(chan struct{}), done: make(chan struct{})}
	if err := sk.open(); err != nil {
		room.Close()
		return nil, err
	}
	d.log.Info("sample file", "stage", s.Stage, "file", sk.path, "max_bytes", sk.max)
	return sk, nil
}

// files is what the sinks wrote, in the order they were opened.
func (sf *sampleFiles) files() []control.SampleFile {
	sf.mu.Lock()
	defer sf.mu.Unlock()
	var out []control.SampleFile
	for _, name := range sf.order {
		out = append(out, sf.sinks[name].info())
	}
	return out
}

// close stops every writer after a last drain (the engines have stopped).
func (sf *sampleFiles) close() error {
	sf.mu.Lock()
	defer sf.mu.Unlock()
	var errs []error
	for _, name := range sf.order {
		if err := sf.sinks[name].close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// sampleSink is one sample file: the rings the queues' I/O loops fill and
// the writer that drains them.
type sampleSink struct {
	stage, name string
	room        *trust.Room
	max         int64
	stop, done  chan struct{}
	closeOnce   sync.Once

	mu    sync.Mutex // guards rings (appended on the control path) and the fields below
	rings []*sampleRing
	path  string
	f     *os.File
	w     *pcapgo.Writer
	size  int64
	// written and rotations are the writer's; errMsg its first error,
	// after which it writes no more (what the rings hold is missed).
	written, rotations uint64
	errMsg             string
}

// sampleSnaplen is the pcap's snap length: the sink copies whole frames.
const sampleSnaplen = 65535

func (s *sampleSink) open() error {
	if err := s.room.Rename(s.name, s.name+".1"); err == nil {
		s.rotations++
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("move the earlier %s aside: %w", s.room.Path(s.name), err)
	}
	f, err := s.room.Create(s.name, captureFileMode)
	if err != nil {
		return fmt.Errorf("sample file: %w", err)
	}
	w := pcapgo.NewWriter(f)
	if err := w.WriteFileHeader(sampleSnaplen, layers.LinkTypeEthernet); err != nil {
		f.Close()
		s.room.Remove(s.name)
		return fmt.Errorf("sample file header: %w", err)
	}
	s.f, s.w, s.path, s.size = f, w, f.Name(), 24
	return nil
}

// forQueue is queue qi's port into the sink (its ring, made on first use).
func (s *sampleSink) forQueue(qi, frameSize int) dataplane.Port {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.rings) <= qi {
		s.rings = append(s.rings, nil)
	}
	if s.rings[qi] == nil {
		r := &sampleRing{sink: s, slots: make([][]byte, sampleSlots), lens: make([]int, sampleSlots), at: make([]int64, sampleSlots)}
		for i := range r.slots {
			r.slots[i] = make([]byte, frameSize)
		}
		s.rings[qi] = r
	}
	return s.rings[qi]
}

// run drains the rings every sampleFlush until close.
func (s *sampleSink) run(log *slog.Logger) {
	defer close(s.done)
	t := time.NewTicker(sampleFlush)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			s.drain(log)
			return
		case <-t.C:
			s.drain(log)
		}
	}
}

// drain writes what every ring holds, rotating the file at s.max.
func (s *sampleSink) drain(log *slog.Logger) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.rings {
		if r == nil {
			continue
		}
		head, tail := r.head.Load(), r.tail.Load()
		for ; head != tail; head++ {
			i := head % sampleSlots
			if s.errMsg == "" {
				s.write(r.at[i], r.slots[i][:r.lens[i]], log)
			}
			if s.errMsg != "" {
				r.missed.Add(1)
			}
		}
		r.head.Store(head)
	}
}

// write appends one packet, rotating first when it would pass s.max.
// s.mu is held.
func (s *sampleSink) write(at int64, data []byte, log *slog.Logger) {
	rec := int64(16 + len(data))
	if s.size+rec > s.max && s.size > 24 {
		if err := s.rotate(); err != nil {
			s.errMsg = err.Error()
			log.Error("sample file", "stage", s.stage, "file", s.path, "err", err)
			return
		}
	}
	ci := gopacket.CaptureInfo{Timestamp: time.Unix(0, at), CaptureLength: len(data), Length: len(data)}
	if err := s.w.WritePacket(ci, data); err != nil {
		s.errMsg = err.Error()
		log.Error("sample file", "stage", s.stage, "file", s.path, "err", err)
		return
	}
	s.size += rec
	s.written++
}

// rotate moves the full file to NAME.1 and starts NAME again.
func (s *sampleSink) rotate() error {
	if err := s.f.Close(); err != nil {
		return err
	}
	return s.open()
}

// close stops the writer after a last drain and closes the file.
func (s *sampleSink) close() error {
	var err error
	s.closeOnce.Do(func() {
		close(s.stop)
		<-s.done
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.f != nil {
			err = s.f.Close()
		}
		s.room.Close()
	})
	return err
}

func (s *sampleSink) info() control.SampleFile {
	s.mu.Lock()
	defer s.mu.Unlock()
	fi := control.SampleFile{Stage: s.stage, File: s.path, Written: s.written, Bytes: s.size, Rotations: s.rotations, Error: s.errMsg}
	for _, r := range s.rings {
		if r != nil {
			fi.Missed += r.missed.Load()
		}
	}
	return fi
}

// sampleRing is one queue's ring into a sink: single producer (the
// queue's I/O loop: Transmit), single consumer (the writer: drain). tail
// is the producer's, published after the slot is written; head the
// consumer's, published after the slot is read.
type sampleRing struct {
	sink       *sampleSink
	slots      [][]byte
	lens       []int
	at         []int64
	head, tail atomic.Uint64
	missed     atomic.Uint64
}

var _ dataplane.Port = (*sampleRing)(nil)

func (r *sampleRing) Name() string { return "sample " + r.sink.name }

func (r *sampleRing) Receive(*rings.Batch) (int, error) { return 0, dataplane.ErrNotReceiver }

// Transmit copies every packet into the ring (the frames stay the
// engine's), counting those it has no room for as missed; it takes them
// all, so the engine counts nothing refused. One clock read per call.
func (r *sampleRing) Transmit(a *rings.Arena, descs []rings.Desc) (int, error) {
	now := time.Now().UnixNano()
	tail, head := r.tail.Load(), r.head.Load()
	missed := 0
	for _, d := range descs {
		if tail-head == sampleSlots {
			missed++
			continue
		}
		i := tail % sampleSlots
		r.lens[i] = copy(r.slots[i], a.Bytes(d))
		r.at[i] = now
		tail++
	}
	r.tail.Store(tail)
	if missed > 0 {
		r.missed.Add(uint64(missed))
	}
	return len(descs), nil
}

func (r *sampleRing) Recycle([]rings.Desc) {}

func (r *sampleRing) Close() error { return nil }

var _ io.Closer = (*sampleRing)(nil)
