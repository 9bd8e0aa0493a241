package gpu

import (
	"fmt"
	"unsafe"
)

// backend is what plays the kernel: the CUDA device, or the emulator (the
// host build of kernel.cu behind a pipe).
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
	// kernel and returns its address there, until the backend closes
	// (unregistering waits for the device to be idle, which a persistent
	// kernel never is).
	hostRegister(mem []byte) (dptr uint64, err error)
	// deviceZero returns n zeroed bytes of device memory (before the
	// kernel runs); deviceAllocRaw n bytes as they are (any time).
	deviceZero(n int) (dptr uint64, err error)
	deviceAllocRaw(n int) (dptr uint64, err error)
	// upload places a device program and, right after it, its zeroed
	// counters (counterWords words) where the kernel reads them; free
	// releases them.
	upload(words []uint64, counterWords int) (handle uint64, err error)
	// rewrite places another program (and zeroed counters) in memory an
	// upload returned, large enough, while the kernel may run.
	rewrite(handle uint64, words []uint64, counterWords int) error
	readCounters(h uint64, progWords int, dst []uint64) error
	// readMem copies device memory at dptr into dst (a stopped kernel's).
	readMem(dptr uint64, dst []byte) error
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

func (v *device) upload(words []uint64, counterWords int) (uint64, error) {
	src := unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), 8*len(words))
	h, err := v.deviceAlloc(len(src)+8*counterWords, src)
	if err != nil {
		return 0, fmt.Errorf("upload program: %w", err)
	}
	return h, nil
}

func (v *device) rewrite(h uint64, words []uint64, counterWords int) error {
	src := unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), 8*len(words))
	if err := v.deviceWrite(h, len(src)+8*counterWords, src); err != nil {
		return fmt.Errorf("upload program: %w", err)
	}
	return nil
}

func (v *device) readCounters(h uint64, progWords int, dst []uint64) error {
	if len(dst) == 0 {
		return nil
	}
	return v.readDevice(unsafe.Slice((*byte)(unsafe.Pointer(&dst[0])), 8*len(dst)), h+8*uint64(progWords))
}

func (v *device) readMem(dptr uint64, dst []byte) error { return v.readDevice(dst, dptr) }

func (v *device) deviceZero(n int) (uint64, error) { return v.deviceAlloc(n, nil) }

func (v *device) deviceAllocRaw(n int) (uint64, error) {
	var dptr uint64
	err := v.do(func() error {
		if err := v.d.check("cuMemAlloc", v.d.cuMemAlloc(&dptr, uintptr(n))); err != nil {
			return err
		}
		v.deviceAllocs = append(v.deviceAllocs, dptr)
		return nil
	})
	return dptr, err
}

func (v *device) start(a kernelArgs, blocks int) error { return v.launch(a, blocks) }
func (v *device) state() (bool, error)                 { return v.kernelState() }
func (v *device) wait() error                          { return v.waitKernel() }
