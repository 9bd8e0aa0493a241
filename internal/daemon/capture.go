package daemon

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
	"github.com/warpflow/warpflow/internal/control"
	"github.com/warpflow/warpflow/internal/trust"
	"github.com/warpflow/warpflow/pipelines"
)

// captureFileMode is a capture file's mode: the daemon's user writes it,
// the capture_dir's group (the socket group, when the daemon made the
// directory) reads it.
const captureFileMode = 0o640

// captureRoom opens the capture_dir (trust.OpenRoom: every component
// checked, made where missing, opened without following a link). A
// directory the daemon makes gets the socket group, setgid, so the
// group's members can read what they captured.
func (d *Daemon) captureRoom() (*trust.Room, error) { return d.room(d.cfg.CaptureDir) }

// room opens dir as the capture_dir is opened: checked, made 0750 with
// the socket group where missing (capture_dir, and the sample files'
// capture_dir/samples).
func (d *Daemon) room(dir string) (*trust.Room, error) {
	gid := -1
	if d.cfg.Control.Group != "" {
		var err error
		if gid, err = control.LookupGroup(d.cfg.Control.Group); err != nil {
			return nil, err
		}
	}
	return trust.OpenRoom(dir, trust.RoomOptions{Chain: trust.Chain{Owners: []int{os.Geteuid()}}, Mode: 0o750, GID: gid})
}

// captureBuffer is each tap buffer's size (two are used in turn): at the
// writer's 20 ms cadence it holds some 200 Mbit/s of full packets.
const captureBuffer = 4 << 20

// capture is a tap on every queue's engine and the goroutine that writes
// what it copies to a pcap file, off the data path.
type capture struct {
	req control.CaptureRequest
	// tap is the tap made at the start, on graph; a swap the capture
	// follows sets views of it (Tap.Follow: same count and buffers) on
	// the new pipeline, so the writer drains this one throughout.
	tap     *pipelines.Tap
	graph   *pipelines.Graph
	stop    chan struct{}
	done    chan struct{}
	mu      sync.Mutex // guards the fields below
	written uint64
	stopped string
	err     error
}

// activeCapture returns the capture in progress, or nil.
func (d *Daemon) activeCapture() *capture {
	d.capMu.Lock()
	c := d.capture
	d.capMu.Unlock()
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped != "" || c.tap.Done() {
		return nil
	}
	return c
}

func (d *Daemon) captureInfo() control.CaptureInfo {
	d.capMu.Lock()
	c := d.capture
	d.capMu.Unlock()
	if c == nil {
		return control.CaptureInfo{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	ci := control.CaptureInfo{
		Active: c.stopped == "", Stage: c.req.Stage, Edge: c.req.Edge, File: c.req.File,
		Count: c.req.Count, Snaplen: c.req.Snaplen, Written: c.written, Missed: c.tap.Missed(), Stopped: c.stopped,
	}
	if ci.Active && d.kernelTaken() {
		ci.KernelRulesOnWorkers = true
	}
	return ci
}

func (d *Daemon) captureStart(r control.CaptureRequest) (control.CaptureInfo, error) {
	d.ctlMu.Lock()
	defer d.ctlMu.Unlock()
	if ci := d.captureInfo(); ci.Active {
		return ci, control.Errorf(control.ErrConflict, "a capture of stage %q to %s is running: stop it first", ci.Stage, ci.File)
	}
	// The name is checked here too, not only by the server: the daemon
	// makes the file, so it decides what it will make.
	name := r.File
	if err := trust.ValidName(name); err != nil {
		return control.CaptureInfo{}, control.Errorf(control.ErrBadRequest, "capture file: %v", err)
	}
	g := d.graph
	tap, err := g.NewTap(r.Stage, r.Edge, r.Count, r.Snaplen, captureBuffer)
	if err != nil {
		return control.CaptureInfo{}, control.Errorf(control.ErrBadRequest, "%v", err)
	}
	room, err := d.captureRoom()
	if err != nil {
		return control.CaptureInfo{}, control.Errorf(control.ErrInternal, "capture_dir: %v", err)
	}
	defer room.Close()
	f, err := room.Create(name, captureFileMode)
	switch {
	case errors.Is(err, fs.ErrExist):
		return control.CaptureInfo{}, control.Errorf(control.ErrConflict, "capture file %s exists (a file, link or FIFO of that name): pick another name", room.Path(name))
	case errors.Is(err, trust.ErrUnsafe):
		return control.CaptureInfo{}, control.Errorf(control.ErrConflict, "capture file %s: %v", room.Path(name), err)
	case err != nil:
		return control.CaptureInfo{}, control.Errorf(control.ErrInternal, "capture file: %v", err)
	}
	r.File = f.Name() // the full path, for the reply and the logs
	w := pcapgo.NewWriter(f)
	if err := w.WriteFileHeader(uint32(r.Snaplen), layers.LinkTypeEthernet); err != nil {
		f.Close()
		room.Remove(name)
		return control.CaptureInfo{}, control.Errorf(control.ErrInternal, "capture file header: %v", err)
	}
	c := &capture{req: r, tap: tap, graph: g, stop: make(chan struct{}), done: make(chan struct{})}
	for i, qq := range d.queues {
		if err := qq.eng.SetTap(g, tap); err != nil {
			for _, back := range d.queues[:i] {
				back.eng.SetTap(nil, nil)
			}
			f.Close()
			room.Remove(name)
			return control.CaptureInfo{}, control.Errorf(control.ErrConflict, "%v", err)
		}
	}
	// A tap the kernel rules would hide frames from (pipelines.Tap.
	// SeesKernel) gets them back: the workers run those rules while it
	// is on. Any other tap lets a set a capture before it took come back.
	sees := tap.SeesKernel(d.off.mode)
	if err := d.takeKernel(sees); err != nil {
		if sees {
			for _, qq := range d.queues {
				qq.eng.SetTap(nil, nil)
			}
			f.Close()
			room.Remove(name)
			return control.CaptureInfo{}, control.Errorf(control.ErrInternal,
				"capture of stage %q: the XDP program decides some of the frames it would see, and its kernel rules could not be moved to the workers for the capture: %v", control.Clip(r.Stage), err)
		}
		d.log.Error("the kernel rules could not be put back into the XDP program after a capture: the workers run them", "err", err)
	}
	d.capMu.Lock()
	d.capture = c
	d.capMu.Unlock()
	go d.writeCapture(c, f, w)
	d.log.Info("capture started", "stage", control.Clip(r.Stage), "edge", control.Clip(r.Edge), "file", r.File, "count", r.Count, "snaplen", r.Snaplen)
	return d.captureInfo(), nil
}

// writeCapture drains the tap into the file until it took its count or is
// stopped, then removes the tap and closes the file.
func (d *Daemon) writeCapture(c *capture, f *os.File, w *pcapgo.Writer) {
	// Last, once c.done lets a waiting captureStopLocked go on: the
	// kernel rules back where no capture needs them.
	defer func() {
		d.ctlMu.Lock()
		d.releaseKernel()
		d.ctlMu.Unlock()
	}()
	defer close(c.done)
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	reason := ""
	var werr error
	drain := func() {
		c.tap.Drain(func(ts time.Time, data []byte, length int) {
			if werr != nil {
				return
			}
			ci := gopacket.CaptureInfo{Timestamp: ts, CaptureLength: len(data), Length: length}
			if werr = w.WritePacket(ci, data); werr == nil {
				c.mu.Lock()
				c.written++
				c.mu.Unlock()
			}
		})
	}
	for reason == "" {
		select {
		case <-c.stop:
			reason = "stopped"
		case <-t.C:
			if c.tap.Done() {
				reason = fmt.Sprintf("count %d reached", c.req.Count)
			}
		}
		drain()
		if werr != nil && reason == "" {
			reason = "write error: " + werr.Error()
		}
	}
	c.tap.Stop()
	for _, qq := range d.queues {
		qq.eng.SetTap(nil, nil)
	}
	drain() // what was copied before the runners let go of the tap
	if err := f.Close(); err != nil && werr == nil {
		werr = err
		reason = "close: " + err.Error()
	}
	c.mu.Lock()
	if c.stopped == "" {
		c.stopped = reason
	}
	c.err = werr
	c.mu.Unlock()
	d.log.Info("capture ended", "stage", c.req.Stage, "file", c.req.File, "written", c.written, "missed", c.tap.Missed(), "reason", c.stopped)
}

func (d *Daemon) captureStop(reason string) (control.CaptureInfo, error) {
	d.ctlMu.Lock()
	defer d.ctlMu.Unlock()
	if !d.captureInfo().Active {
		if ci := d.captureInfo(); ci.Stopped != "" {
			return ci, nil // already ended: report how
		}
		return control.CaptureInfo{}, control.Errorf(control.ErrNotFound, "%v is running", errNoCapture)
	}
	d.captureStopLocked(reason)
	return d.captureInfo(), nil
}

// captureStopLocked stops a running capture and waits for its file to be
// closed. d.ctlMu is held.
func (d *Daemon) captureStopLocked(reason string) {
	d.capMu.Lock()
	c := d.capture
	d.capMu.Unlock()
	if c == nil {
		return
	}
	c.mu.Lock()
	active := c.stopped == ""
	if active {
		c.stopped = reason
	}
	c.mu.Unlock()
	if active {
		close(c.stop)
	}
	<-c.done
	d.releaseKernel()
}

// releaseKernel puts the kernel rules back into the XDP programs once no
// capture needs the workers to run them (takeKernel). d.ctlMu is held.
func (d *Daemon) releaseKernel() {
	if d.activeCapture() != nil {
		return // the running capture decided, at its start or at a swap
	}
	if err := d.takeKernel(false); err != nil {
		d.log.Error("the kernel rules could not be put back into the XDP program after a capture: the workers run them", "err", err)
	}
}
