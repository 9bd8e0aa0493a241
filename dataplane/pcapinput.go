package dataplane

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
	"time"
)

// Opening a capture for replay. A capture is read once, front to back, so
// anything that streams works: a file, standard input ("-"), a pipe
// (/dev/stdin, process substitution such as <(zcat x.pcap.gz)), a FIFO.
// Only a regular file can be read twice (to size frames ahead, to loop);
// the rest are sized from their headers (see pcapscan.go).
//
// Two things can block: opening a FIFO that has no writer yet, and reading
// a pipe whose writer is slow (a live tcpdump). Both give way to the
// replay's context (Ctrl-C, SIGTERM): the open runs on a goroutine that is
// abandoned, and then woken by opening the FIFO's write end, so that
// nothing is left blocked; a pipe is opened pollable, so that a read
// deadline set when the context ends wakes the read.

// StdinName is the capture name that means standard input.
const StdinName = "-"

// captureInput is an opened capture.
type captureInput struct {
	f        *os.File
	name     string // for errors: the path, or "standard input"
	seekable bool   // a regular file: can be read twice
	size     int64  // a regular file's size, else 0
	stop     func() bool
}

// close releases what openCapture set up, except the file.
func (c *captureInput) release() {
	if c.stop != nil {
		c.stop()
	}
}

// openCapture opens path ("-": standard input) for replay. A directory, a
// device, a socket or an unreadable file is named as such. ctx ends a
// blocked FIFO open (the error wraps ErrInterrupted) and, once the capture
// is open, makes blocked reads of a pipe or FIFO fail with
// os.ErrDeadlineExceeded.
func openCapture(ctx context.Context, path string) (*captureInput, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	in := &captureInput{name: path}
	if path == StdinName {
		in.name = "standard input"
		fi, err := os.Stdin.Stat()
		if err != nil {
			return nil, fmt.Errorf("capture %s: %w", in.name, err)
		}
		if err := notACapture(in.name, fi); err != nil {
			return nil, err
		}
		in.f = os.Stdin
		if fi.Mode().IsRegular() {
			in.seekable, in.size = true, fi.Size()
			return in, nil
		}
		// A pipe or FIFO on standard input: open it again through /proc,
		// pollable, so that a read gives way to ctx. (A socket cannot be
		// reopened; it is read as it is.)
		if f, err := os.OpenFile(fmt.Sprintf("/proc/self/fd/%d", os.Stdin.Fd()), os.O_RDONLY|syscall.O_NONBLOCK, 0); err == nil {
			in.f = f
		}
		in.watch(ctx)
		return in, nil
	}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, openErr(path, err)
	}
	if err := notACapture(path, fi); err != nil {
		return nil, err
	}
	if fi.Mode()&fs.ModeNamedPipe != 0 {
		f, err := openFIFO(ctx, path)
		if err != nil {
			return nil, err
		}
		in.f = f
		in.watch(ctx)
		return in, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, openErr(path, err)
	}
	in.f = f
	in.seekable, in.size = fi.Mode().IsRegular(), fi.Size()
	return in, nil
}

// watch makes reads of a pollable input fail once ctx is done.
func (c *captureInput) watch(ctx context.Context) {
	f := c.f
	c.stop = context.AfterFunc(ctx, func() {
		f.SetReadDeadline(time.Now()) // fails harmlessly for a file that cannot poll
	})
}

// notACapture names what fi is when it cannot hold a capture.
func notACapture(name string, fi fs.FileInfo) error {
	m := fi.Mode()
	var what string
	switch {
	case m.IsDir():
		what = "a directory"
	case m&fs.ModeCharDevice != 0 && name == "standard input":
		return fmt.Errorf("capture %s is a terminal or a device: pipe a capture into it (warpctl replay - < capture.pcap) or name a file: %w", name, ErrNotCaptureFile)
	case m&fs.ModeCharDevice != 0:
		what = "a character device"
	case m&fs.ModeDevice != 0:
		what = "a block device"
	case m&fs.ModeSocket != 0 && name != "standard input":
		what = "a socket"
	default:
		return nil
	}
	return fmt.Errorf("capture %s is %s: %w", name, what, ErrNotCaptureFile)
}

// ErrNotCaptureFile is wrapped by the error for a capture path that names
// a directory, a device or a socket.
var ErrNotCaptureFile = errors.New("not a capture file")

// openErr says why path could not be opened.
func openErr(path string, err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("capture %s does not exist: %w", path, err)
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("capture %s is not readable (permission denied): %w", path, err)
	}
	return fmt.Errorf("open capture: %w", err)
}

// openFIFO opens a FIFO, which blocks until a writer opens it, giving way
// to ctx: the open goes on, on its own goroutine, which a writer that
// opens and closes at once then wakes, so that it ends and closes what it
// opened.
func openFIFO(ctx context.Context, path string) (*os.File, error) {
	type opened struct {
		f   *os.File
		err error
	}
	done := make(chan opened, 1)
	go func() {
		f, err := os.Open(path)
		done <- opened{f, err}
	}()
	select {
	case o := <-done:
		if o.err != nil {
			return nil, openErr(path, o.err)
		}
		return o.f, nil
	case <-ctx.Done():
	}
	go func() {
		// A non-blocking open of the write end succeeds once our reader is
		// waiting in its open (ENXIO before): retry briefly.
		for i := 0; i < 200; i++ {
			select {
			case o := <-done:
				if o.f != nil {
					o.f.Close()
				}
				return
			default:
			}
			if w, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
				w.Close()
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	return nil, fmt.Errorf("capture %s: waiting for a writer to open the FIFO: %w", path, ErrInterrupted)
}
