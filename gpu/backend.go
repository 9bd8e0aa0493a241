package gpu

import (
	"fmt"
	"unsafe"

	"github.com/warpflow/warpflow/pipelines"
)

// backend is what plays the kernel: the CUDA device, or the emulator.
type backend interface {
	describe() string
	multiprocessors() int
	// residentBlocks is how many kernel blocks fit on one multiprocessor
	// at once.
	residentBlocks() int
	// hostAlloc returns zeroed memory both sides can reach, and its
	// address on the kernel's side.
	hostAlloc(n int) (mem []byte, dptr uint64, err error)
	// hostRegister makes mem (kept alive by the caller) reachable by the
	// kernel and returns its address there.
	hostRegister(mem []byte) (dptr uint64, err error)
	// upload places a blob and, right after it, zeroed counters
	// (2*(rules+1) words) where the kernel reads them, returning their
	// handles.
	upload(b *pipelines.FilterBlob) (blob, counters uint64, err error)
	readCounters(h uint64, dst []uint64) error
	start(a kernelArgs, blocks int) error
	// state reports whether the kernel has stopped, and its error if it
	// failed.
	state() (done bool, err error)
	wait() error
	close()
}

func (v *device) describe() string {
	return fmt.Sprintf("%s (sm_%d%d, %d SMs, CUDA driver %d.%d)", v.name, v.ccMajor, v.ccMinor, v.sms, v.version/1000, v.version%1000/10)
}

func (v *device) multiprocessors() int { return v.sms }
func (v *device) residentBlocks() int  { return v.occ }

func (v *device) upload(b *pipelines.FilterBlob) (blob, counters uint64, err error) {
	// One allocation: the blob, then its counters (the kernel finds them
	// at blob + 8*words).
	src := unsafe.Slice((*byte)(unsafe.Pointer(&b.Words[0])), 8*len(b.Words))
	if blob, err = v.deviceAlloc(len(src)+16*(b.Rules+1), src); err != nil {
		return 0, 0, fmt.Errorf("upload blob: %w", err)
	}
	return blob, blob + uint64(len(src)), nil
}

func (v *device) readCounters(h uint64, dst []uint64) error {
	if len(dst) == 0 {
		return nil
	}
	return v.readDevice(unsafe.Slice((*byte)(unsafe.Pointer(&dst[0])), 8*len(dst)), h)
}

func (v *device) start(a kernelArgs, blocks int) error { return v.launch(a, blocks) }
func (v *device) state() (bool, error)                 { return v.kernelState() }
func (v *device) wait() error                          { return v.waitKernel() }
