package daemon

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/warpflow/warpflow/internal/control"
	"github.com/warpflow/warpflow/internal/trust"
	"github.com/warpflow/warpflow/pipelines"
	"golang.org/x/sys/unix"
)

// The pipeline watch (config watch: true, warpflowd --watch) follows the
// pipeline file without a restart, the way a Kubernetes ConfigMap volume
// changes it: the kubelet writes the new files into a fresh hidden
// directory and renames a ..data symlink onto it, so the file's path
// (pipeline.yaml -> ..data/pipeline.yaml) never changes and the file
// itself is never written. So the watch is on the file's directory
// (inotify), and any event there (a rename, a create, a close after a
// write, a delete) makes it read the file again once the directory has
// been quiet for watchDebounce:
//
//   - content unchanged (its sha256 is what runs from the file): nothing;
//   - changed and valid: loaded into the store as watch-<hash> through the
//     same load as `warpctl pipeline load` (compiled and checked against
//     this daemon's interfaces) and swapped in with the same Swap as
//     `warpctl pipeline swap`; the pipeline the watch had swapped in
//     before is removed from the store;
//   - unreadable, not a regular file, over pipelines.MaxConfigBytes, or
//     invalid: refused, logged with the reason, counted; the running
//     pipeline keeps running and the same bad content is not counted
//     again until the file changes;
//   - valid but a queue refuses the swap: failed, logged, counted; tried
//     again at the next event or resync.
//
// The outcome is in stats (Stats.Watch) and in the metrics
// (warpflow_pipeline_watch_total{result}, warpflow_pipeline_watch_in_sync).
// A missed event cannot leave the file unread for long: the queue
// overflowing makes it read at once, and it is read every watchResync
// anyway. If the directory goes away the watch is retried every
// watchRetry. An editor that rewrites the file in place may show a
// half-written file for an instant; the debounce lets the write finish,
// and renaming a complete file into place (what the kubelet does) never
// shows one.
const (
	watchDebounce = 100 * time.Millisecond
	watchResync   = 30 * time.Second
	watchRetry    = time.Second
	// watchErrorBytes bounds an error kept in stats or logged.
	watchErrorBytes = 512
)

// pipelineWatch is the watch's state; mu guards it. It lives for one Run.
type pipelineWatch struct {
	d    *Daemon
	path string // the pipeline file as configured (it may be a symlink)
	dir  string

	mu      sync.Mutex
	st      control.WatchStats
	applied [32]byte // sha256 of what runs from the file
	refused [32]byte // sha256 of the content last refused (not counted twice)
	loaded  string   // the store name the watch swapped in last ("": the startup pipeline)
}

// startWatch starts the pipeline watch; stop ends it and waits for it.
func (d *Daemon) startWatch(ctx context.Context) (stop func()) {
	path := d.cfg.PipelinePath()
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	w := &pipelineWatch{d: d, path: path, dir: filepath.Dir(path)}
	d.ctlMu.Lock()
	if s := d.store[d.running]; s != nil {
		w.applied = sha256.Sum256([]byte(s.source))
	}
	d.ctlMu.Unlock()
	w.st = control.WatchStats{File: path, InSync: true}
	d.watch.Store(w)
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.run(wctx)
	}()
	return func() {
		cancel()
		<-done
	}
}

// watchStats is the watch's account for Stats (nil without a watch).
func (d *Daemon) watchStats() *control.WatchStats {
	w := d.watch.Load()
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	st := w.st
	if st.Last != nil {
		last := *st.Last
		st.Last = &last
	}
	return &st
}

// watchSignal is what the directory's events come to.
type watchSignal int

const (
	watchChanged  watchSignal = iota // something in the directory changed
	watchOverflow                    // the kernel's event queue overflowed: read now
	watchGone                        // the directory went: watch it again
)

func (w *pipelineWatch) run(ctx context.Context) {
	log := w.d.log
	signals := make(chan watchSignal, 1)
	var in *dirWatch
	defer func() {
		if in != nil {
			in.Close()
		}
	}()
	resync := time.NewTicker(watchResync)
	defer resync.Stop()
	retry := time.NewTimer(0) // the first watch now
	defer retry.Stop()
	debounce := time.NewTimer(time.Hour)
	debounce.Stop()
	defer debounce.Stop()
	warned := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-retry.C:
			var err error
			if in, err = watchDir(w.dir, signals); err != nil {
				if !warned { // once until it works: it is retried every second
					log.Warn("pipeline watch: cannot watch the directory; retrying every second", "dir", w.dir, "err", err)
					warned = true
				}
				retry.Reset(watchRetry)
				continue
			}
			if warned {
				log.Info("pipeline watch: watching again", "dir", w.dir)
			}
			warned = false
			w.setWatching(true)
			log.Info("pipeline watch", "file", w.path, "dir", w.dir)
			// Whoever can write the directory chooses what this daemon
			// runs. A ConfigMap volume is the pod's own (its directory may
			// well be mode 0777 inside the container), so say it rather
			// than refuse.
			if _, err := (trust.Chain{Owners: []int{os.Geteuid()}}).Check(w.dir, trust.Dir); err != nil {
				log.Warn("pipeline watch: others can change the pipeline file's directory, and so what this daemon runs", "dir", w.dir, "err", err)
			}
			w.check() // it may have changed while it was not watched
		case s := <-signals:
			switch s {
			case watchGone:
				in.Close()
				in = nil
				w.setWatching(false)
				log.Warn("pipeline watch: the directory went away; retrying every second", "dir", w.dir)
				warned = true
				retry.Reset(watchRetry)
			case watchOverflow:
				w.check()
			default:
				debounce.Reset(watchDebounce) // read once it is quiet
			}
		case <-debounce.C:
			w.check()
		case <-resync.C:
			w.check()
		}
	}
}

func (w *pipelineWatch) setWatching(on bool) {
	w.mu.Lock()
	w.st.Watching = on
	w.mu.Unlock()
}

// check reads the file and, when its content changed, swaps it in or
// refuses it.
func (w *pipelineWatch) check() {
	d := w.d
	src, readErr := readPipelineFile(w.path)
	sum := sha256.Sum256(src)
	if readErr != nil {
		// An unreadable file has no content: its reason stands for it.
		sum = sha256.Sum256([]byte("error: " + readErr.Error()))
	}
	w.mu.Lock()
	unchanged, seen := sum == w.applied, sum == w.refused
	if unchanged {
		w.st.InSync = true
		w.refused = [32]byte{}
	}
	w.mu.Unlock()
	if unchanged || seen {
		return
	}
	short := hex.EncodeToString(sum[:6])
	if readErr != nil {
		w.refuse(sum, short, readErr)
		return
	}
	name := "watch-" + short
	if _, err := d.load("watch", control.LoadRequest{Name: name, File: w.path, Source: string(src)}); err != nil {
		w.refuse(sum, short, err)
		return
	}
	rep, err := d.Swap(name)
	if err != nil {
		d.remove(name) // not running: the swap went back
		w.mu.Lock()
		w.st.Failed++
		w.st.InSync = false
		w.st.Last = &control.WatchEvent{At: time.Now(), Result: control.WatchFailed, SHA256: short, Error: clip(err.Error())}
		w.mu.Unlock()
		d.log.Error("pipeline file not swapped in: a queue refused; the running pipeline keeps running", "file", w.path, "sha256", short, "err", clip(err.Error()))
		return
	}
	w.mu.Lock()
	old := w.loaded
	w.loaded, w.applied, w.refused = name, sum, [32]byte{}
	w.st.Swapped++
	w.st.InSync = true
	w.st.Last = &control.WatchEvent{At: time.Now(), Result: control.WatchSwapped, SHA256: short, Pipeline: d.graphName(), Generation: rep.Generation}
	w.mu.Unlock()
	if old != "" && old != name {
		d.remove(old) // refused (and kept) if someone swapped back to it meanwhile
	}
	d.log.Info("pipeline file swapped in", "file", w.path, "sha256", short, "from", rep.From, "to", name, "pipeline", d.graphName(), "generation", rep.Generation, "active_after_ns", rep.ActiveAfterNs)
}

// refuse records a content the watch will not run.
func (w *pipelineWatch) refuse(sum [32]byte, short string, err error) {
	msg := clip(err.Error())
	w.mu.Lock()
	w.refused = sum
	w.st.Refused++
	w.st.InSync = false
	w.st.Last = &control.WatchEvent{At: time.Now(), Result: control.WatchRefused, SHA256: short, Error: msg}
	w.mu.Unlock()
	w.d.log.Warn("pipeline file refused; the running pipeline keeps running", "file", w.path, "sha256", short, "err", msg)
}

// graphName is the running pipeline's own name.
func (d *Daemon) graphName() string {
	if len(d.queues) == 0 {
		return ""
	}
	_, name := d.queues[0].eng.Generation()
	return name
}

// clip bounds a message kept or logged, on one line (an invalid
// pipeline's error lists its problems one per line).
func clip(s string) string {
	s = strings.ReplaceAll(strings.ReplaceAll(s, ":\n", ": "), "\n", "; ")
	if len(s) > watchErrorBytes {
		return s[:watchErrorBytes] + "..."
	}
	return s
}

// readPipelineFile reads the pipeline file through its symlinks, at
// start and for the watch: a regular file of at most
// pipelines.MaxConfigBytes (the bound of any config), read into one
// buffer of its size. It opens without blocking, so a FIFO put in its
// place cannot stall the watch or hang the daemon at start.
func readPipelineFile(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("read pipeline file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("read pipeline file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("read pipeline file %s: not a regular file (%s)", path, fi.Mode().Type())
	}
	if fi.Size() > pipelines.MaxConfigBytes {
		return nil, fmt.Errorf("pipeline file %s is larger than %d bytes", path, pipelines.MaxConfigBytes)
	}
	data, err := pipelines.ReadAllSized(io.LimitReader(f, pipelines.MaxConfigBytes+1), int(fi.Size())+1)
	if err != nil {
		return nil, fmt.Errorf("read pipeline file: %w", err)
	}
	if len(data) > pipelines.MaxConfigBytes {
		return nil, fmt.Errorf("pipeline file %s is larger than %d bytes", path, pipelines.MaxConfigBytes)
	}
	return data, nil
}

// dirWatch is an inotify watch on one directory.
type dirWatch struct {
	f    *os.File
	stop chan struct{} // closed by Close: the reader sends nothing more
	done chan struct{} // closed by the reader when it returns
}

// watchMask is every event that can change what the file resolves to.
const watchMask = unix.IN_CREATE | unix.IN_DELETE | unix.IN_MOVED_TO | unix.IN_MOVED_FROM |
	unix.IN_CLOSE_WRITE | unix.IN_MODIFY | unix.IN_ATTRIB | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF |
	unix.IN_ONLYDIR

// watchDir watches dir and sends what happens in it on signals
// (coalesced: one pending signal is enough).
func watchDir(dir string, signals chan<- watchSignal) (*dirWatch, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("inotify: %w", err)
	}
	if _, err := unix.InotifyAddWatch(fd, dir, watchMask); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("inotify watch %s: %w", dir, err)
	}
	// A non-blocking descriptor in an *os.File is read through the
	// runtime's poller, so Close wakes a pending Read.
	w := &dirWatch{f: os.NewFile(uintptr(fd), "inotify"), stop: make(chan struct{}), done: make(chan struct{})}
	go w.read(signals)
	return w, nil
}

// Close stops the watch and waits for its reader.
func (w *dirWatch) Close() {
	close(w.stop)
	w.f.Close()
	<-w.done
}

func (w *dirWatch) read(signals chan<- watchSignal) {
	defer close(w.done)
	send := func(s watchSignal) {
		if s == watchChanged {
			select {
			case signals <- s:
			default: // one pending is as good as many
			}
			return
		}
		select { // gone and overflow are not to be coalesced away
		case signals <- s:
		case <-w.stop:
		}
	}
	buf := make([]byte, 64<<10)
	for {
		n, err := w.f.Read(buf)
		if err != nil {
			if !errors.Is(err, os.ErrClosed) {
				send(watchGone)
			}
			return
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			mask := binary.NativeEndian.Uint32(buf[off+4:])
			nameLen := int(binary.NativeEndian.Uint32(buf[off+12:]))
			off += unix.SizeofInotifyEvent + nameLen
			switch {
			case mask&unix.IN_Q_OVERFLOW != 0:
				send(watchOverflow)
			case mask&(unix.IN_IGNORED|unix.IN_DELETE_SELF|unix.IN_MOVE_SELF) != 0:
				send(watchGone)
				return
			default:
				send(watchChanged)
			}
		}
	}
}
