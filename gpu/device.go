package gpu

import (
	_ "embed"
	"fmt"
	"os"
	"runtime"
	"time"
	"unsafe"
)

//go:embed kernel.ptx
var kernelPTX string

// device is one CUDA context on one locked OS thread. Every driver call
// goes through do, which runs it on that thread: the driver binds a
// context to a thread, and a goroutine that wandered to another thread
// would call with no current context (CUDA_ERROR_INVALID_CONTEXT). The hot
// path makes no driver calls at all; it only reads and writes pinned
// memory.
type device struct {
	d       *driver
	calls   chan func()
	done    chan struct{}
	ordinal int32
	ctx     uintptr
	name    string
	sms     int
	ccMajor int
	ccMinor int
	version int
	occ     int // the kernel's co-resident blocks per multiprocessor
	regs    int // and its registers per thread

	mod, fn      uintptr
	kstream      uintptr // the persistent kernel's stream
	cstream      uintptr // copies: blob uploads, counter reads
	launched     bool
	hostAllocs   []unsafe.Pointer
	hostRegs     []unsafe.Pointer
	keep         [][]uint64 // Go memory registered for hostAlloc's "register" mode
	deviceAllocs []uint64
}

// openDevice starts the driver thread and makes device ordinal's primary
// context current on it.
func openDevice(ordinal int) (*device, error) {
	d, err := loadDriver()
	if err != nil {
		return nil, err
	}
	dev := &device{d: d, calls: make(chan func()), done: make(chan struct{}), ordinal: int32(ordinal)}
	ready := make(chan error)
	go dev.loop(ready)
	if err := <-ready; err != nil {
		return nil, err
	}
	return dev, nil
}

// loop is the driver thread.
func (v *device) loop(ready chan<- error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer close(v.done)
	if err := v.setup(); err != nil {
		ready <- err
		return
	}
	close(ready)
	for f := range v.calls {
		f()
	}
	if !v.launched { // a hung kernel keeps its memory until the process exits
		v.teardown()
	}
}

func (v *device) setup() error {
	d := v.d
	var n int32
	if r := d.cuDeviceGetCount(&n); r != cuSuccess || n == 0 {
		if r != cuSuccess {
			return unavailable("cuDeviceGetCount: %s", d.errName(r))
		}
		return unavailable("no CUDA device")
	}
	if v.ordinal < 0 || v.ordinal >= n {
		return unavailable("device %d: only %d present", v.ordinal, n)
	}
	var dev int32
	if r := d.cuDeviceGet(&dev, v.ordinal); r != cuSuccess {
		return unavailable("cuDeviceGet: %s", d.errName(r))
	}
	var name [256]byte
	d.cuDeviceGetName(&name[0], int32(len(name)), dev)
	for i, c := range name {
		if c == 0 {
			v.name = string(name[:i])
			break
		}
	}
	attr := func(a int32) int {
		var x int32
		d.cuDeviceGetAttribute(&x, a, dev)
		return int(x)
	}
	v.sms, v.ccMajor, v.ccMinor = attr(attrSMCount), attr(attrCCMajor), attr(attrCCMinor)
	var ver int32
	d.cuDriverGetVersion(&ver)
	v.version = int(ver)
	if attr(attrCanMapHost) == 0 {
		return unavailable("%s cannot map host memory", v.name)
	}
	if v.ccMajor < 9 {
		return unavailable("%s is compute capability %d.%d; the kernel is built for sm_90", v.name, v.ccMajor, v.ccMinor)
	}
	if r := d.cuDevicePrimaryCtxRetain(&v.ctx, dev); r != cuSuccess {
		return unavailable("cuDevicePrimaryCtxRetain: %s", d.errName(r))
	}
	fail := func(err error) error {
		v.teardown()
		return unavailable("%v", err)
	}
	if err := d.check("cuCtxSetCurrent", d.cuCtxSetCurrent(v.ctx)); err != nil {
		return fail(err)
	}
	ptx := kernelPTX
	if f := os.Getenv("WARPFLOW_PTX"); f != "" {
		// Development only: a PTX file freshly built with scripts/gen-ptx,
		// so a test binary built before it can run it.
		b, err := os.ReadFile(f)
		if err != nil {
			return fail(err)
		}
		ptx = string(b)
	}
	img := append([]byte(ptx), 0)
	if err := d.check("cuModuleLoadData", d.cuModuleLoadData(&v.mod, &img[0])); err != nil {
		return fail(err)
	}
	fname := []byte("wf_kernel\x00")
	if err := d.check("cuModuleGetFunction", d.cuModuleGetFunction(&v.fn, v.mod, &fname[0])); err != nil {
		return fail(err)
	}
	// A persistent kernel needs every block resident at once: a block the
	// scheduler holds back waits for one that never exits, and its slots
	// never complete. Open caps Blocks at what fits.
	var occ, regs, local, shared int32
	if err := d.check("cuOccupancyMaxActiveBlocksPerMultiprocessor", d.cuOccupancyMaxActiveBlocksPerMultiprocessor(&occ, v.fn, kernelThreads, 0)); err != nil {
		return fail(err)
	}
	d.cuFuncGetAttribute(&regs, funcAttrNumRegs, v.fn)
	d.cuFuncGetAttribute(&local, funcAttrLocalBytes, v.fn)
	d.cuFuncGetAttribute(&shared, funcAttrSharedSize, v.fn)
	v.occ, v.regs = int(occ), int(regs)
	tracef("setup: %s, sm_%d%d, %d SMs; kernel %d registers, %d B local, %d B shared per block, %d blocks/SM co-resident; PTX %d bytes%s",
		v.name, v.ccMajor, v.ccMinor, v.sms, regs, local, shared, occ, len(ptx), map[bool]string{true: " from $WARPFLOW_PTX", false: " (embedded)"}[os.Getenv("WARPFLOW_PTX") != ""])
	if occ < 1 {
		return fail(fmt.Errorf("the kernel does not fit on a multiprocessor of %s", v.name))
	}
	if err := d.check("cuStreamCreate", d.cuStreamCreate(&v.kstream, streamNonBlocking)); err != nil {
		return fail(err)
	}
	if err := d.check("cuStreamCreate", d.cuStreamCreate(&v.cstream, streamNonBlocking)); err != nil {
		return fail(err)
	}
	return nil
}

// teardown frees everything the context holds; on the driver thread.
func (v *device) teardown() {
	d := v.d
	if v.ctx == 0 {
		return
	}
	for _, p := range v.deviceAllocs {
		d.cuMemFree(p)
	}
	for _, p := range v.hostAllocs {
		d.cuMemFreeHost(p)
	}
	for _, p := range v.hostRegs {
		d.cuMemHostUnregister(p)
	}
	v.deviceAllocs, v.hostAllocs, v.hostRegs = nil, nil, nil
	if v.kstream != 0 {
		d.cuStreamDestroy(v.kstream)
	}
	if v.cstream != 0 {
		d.cuStreamDestroy(v.cstream)
	}
	if v.mod != 0 {
		d.cuModuleUnload(v.mod)
	}
	d.cuDevicePrimaryCtxRelease(v.ordinal)
	v.ctx = 0
}

// do runs f on the driver thread and returns its error.
func (v *device) do(f func() error) error {
	errc := make(chan error, 1)
	select {
	case v.calls <- func() { errc <- f() }:
	case <-v.done:
		return fmt.Errorf("cuda device closed")
	}
	return <-errc
}

// close ends the driver thread after freeing the context's memory.
func (v *device) close() {
	close(v.calls)
	<-v.done
}

// hostAlloc returns n bytes of pinned host memory mapped into the device
// (cuMemHostAlloc with CU_MEMHOSTALLOC_DEVICEMAP), zeroed, and its device
// address. It stays allocated until the device closes.
func (v *device) hostAlloc(n int) (mem []byte, dptr uint64, err error) {
	mode := os.Getenv("WARPFLOW_HOSTALLOC") // development: "wc", "register"
	if mode == "register" {
		raw := make([]uint64, (n+4095)/8+512)
		off := (4096 - int(uintptr(unsafe.Pointer(&raw[0]))&4095)) & 4095
		mem = unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(&raw[0]), off)), n)
		v.keep = append(v.keep, raw)
		dptr, err = v.hostRegister(mem)
		return mem, dptr, err
	}
	flags := memHostAllocMapped | memHostAllocPort
	if mode == "wc" {
		flags |= memHostAllocWC
	}
	err = v.do(func() error {
		var p unsafe.Pointer
		if err := v.d.check("cuMemHostAlloc", v.d.cuMemHostAlloc(&p, uintptr(n), flags)); err != nil {
			return err
		}
		v.hostAllocs = append(v.hostAllocs, p)
		if err := v.d.check("cuMemHostGetDevicePointer", v.d.cuMemHostGetDevicePointer(&dptr, p, 0)); err != nil {
			return err
		}
		mem = unsafe.Slice((*byte)(p), n)
		clear(mem)
		tracef("hostAlloc %d bytes: host %p device %#x", n, p, dptr)
		return nil
	})
	return mem, dptr, err
}

// hostRegister pins mem (ordinary memory the caller keeps alive, such as
// a Go-allocated frame arena or a UMEM) and maps it into the device
// (cuMemHostRegister with CU_MEMHOSTREGISTER_DEVICEMAP), returning its
// device address. It stays registered until the device closes.
func (v *device) hostRegister(mem []byte) (dptr uint64, err error) {
	err = v.do(func() error {
		p := unsafe.Pointer(&mem[0])
		if err := v.d.check("cuMemHostRegister", v.d.cuMemHostRegister(p, uintptr(len(mem)), memHostRegMapped|memHostRegPortable)); err != nil {
			return err
		}
		v.hostRegs = append(v.hostRegs, p)
		err := v.d.check("cuMemHostGetDevicePointer", v.d.cuMemHostGetDevicePointer(&dptr, p, 0))
		tracef("hostRegister %d bytes: host %p device %#x", len(mem), p, dptr)
		return err
	})
	return dptr, err
}

// deviceWrite zeroes n bytes of device memory at dptr and copies src to
// its start, through the copy stream (the persistent kernel keeps running
// on its own).
func (v *device) deviceWrite(dptr uint64, n int, src []byte) error {
	return v.do(func() error {
		d := v.d
		if err := d.check("cuMemsetD8Async", d.cuMemsetD8Async(dptr, 0, uintptr(n), v.cstream)); err != nil {
			return err
		}
		if err := d.check("cuMemcpyHtoDAsync", d.cuMemcpyHtoDAsync(dptr, unsafe.Pointer(&src[0]), uintptr(len(src)), v.cstream)); err != nil {
			return err
		}
		err := d.check("cuStreamSynchronize", d.cuStreamSynchronize(v.cstream))
		runtime.KeepAlive(src)
		return err
	})
}

// deviceAlloc returns n bytes of device memory, filled from src (zeroed
// past it) through the copy stream.
func (v *device) deviceAlloc(n int, src []byte) (dptr uint64, err error) {
	err = v.do(func() error {
		d := v.d
		if err := d.check("cuMemAlloc", d.cuMemAlloc(&dptr, uintptr(n))); err != nil {
			return err
		}
		v.deviceAllocs = append(v.deviceAllocs, dptr)
		if err := d.check("cuMemsetD8Async", d.cuMemsetD8Async(dptr, 0, uintptr(n), v.cstream)); err != nil {
			return err
		}
		if len(src) > 0 {
			if err := d.check("cuMemcpyHtoDAsync", d.cuMemcpyHtoDAsync(dptr, unsafe.Pointer(&src[0]), uintptr(len(src)), v.cstream)); err != nil {
				return err
			}
		}
		err := d.check("cuStreamSynchronize", d.cuStreamSynchronize(v.cstream))
		runtime.KeepAlive(src)
		tracef("deviceAlloc %d bytes at %#x (%d copied): %v", n, dptr, len(src), err)
		return err
	})
	return dptr, err
}

// readDevice copies len(dst) bytes from device address src through the
// copy stream (the persistent kernel keeps running on its own stream).
func (v *device) readDevice(dst []byte, src uint64) error {
	if len(dst) == 0 {
		return nil
	}
	return v.do(func() error {
		d := v.d
		if err := d.check("cuMemcpyDtoHAsync", d.cuMemcpyDtoHAsync(unsafe.Pointer(&dst[0]), src, uintptr(len(dst)), v.cstream)); err != nil {
			return err
		}
		return d.check("cuStreamSynchronize", d.cuStreamSynchronize(v.cstream))
	})
}

// launch starts the persistent kernel: blocks blocks of 128 threads.
func (v *device) launch(a kernelArgs, blocks int) error {
	return v.do(func() error {
		args := a
		tracef("launch %d blocks x %d threads, args %+v", blocks, kernelThreads, args)
		params := []unsafe.Pointer{unsafe.Pointer(&args)}
		r := v.d.cuLaunchKernel(v.fn, uint32(blocks), 1, 1, kernelThreads, 1, 1, 0, v.kstream, &params[0], 0)
		runtime.KeepAlive(&args)
		if err := v.d.check("cuLaunchKernel", r); err != nil {
			return err
		}
		v.launched = true
		tracef("launched")
		return nil
	})
}

// kernelState reports nil while the kernel runs or after it finished
// cleanly, or the error it stopped with; done says it has finished.
func (v *device) kernelState() (done bool, err error) {
	err = v.do(func() error {
		switch r := v.d.cuStreamQuery(v.kstream); r {
		case cuSuccess:
			done = true
		case cuErrorNotReady:
		default:
			done = true
			return v.d.check("persistent kernel", r)
		}
		return nil
	})
	return done, err
}

// waitKernel waits for the kernel to exit (after the stop word is set).
// A stopped kernel exits within a few polls; stopWait bounds the wait for
// one that does not (a hung kernel then stays until the process exits,
// which destroys the context).
const stopWait = 3 * time.Second

func (v *device) waitKernel() error {
	deadline := time.Now().Add(stopWait)
	for {
		var done bool
		err := v.do(func() error {
			if !v.launched {
				done = true
				return nil
			}
			switch r := v.d.cuStreamQuery(v.kstream); r {
			case cuErrorNotReady:
				return nil
			default:
				done, v.launched = true, false
				return v.d.check("persistent kernel", r)
			}
		})
		if done || err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("persistent kernel did not stop within %v", stopWait)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// traceOn is WARPFLOW_GPU_TRACE=1 (development): setup, allocations, the
// launch and the stop are logged to stderr, never the hot path.
var traceOn = os.Getenv("WARPFLOW_GPU_TRACE") == "1"

func tracef(format string, args ...any) {
	if traceOn {
		fmt.Fprintf(os.Stderr, "gpu trace: "+format+"\n", args...)
	}
}
