package gpu

import (
	"errors"
	"fmt"
	"unsafe"
)

// ErrUnavailable wraps every reason the CUDA backend cannot run here: no
// libcuda.so.1, no device, a driver error at setup. Its message reads
// "cuda backend unavailable: <reason>".
var ErrUnavailable = errors.New("cuda backend unavailable")

func unavailable(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrUnavailable, fmt.Sprintf(format, args...))
}

type cuResult int32

// driver holds the CUDA driver API entry points, loaded from libcuda.so.1
// with purego (no cgo). Names with a _v2 suffix are the ABI symbols that
// cuda.h's macros map the plain names to.
type driver struct {
	cuInit                                      func(flags uint32) cuResult
	cuDriverGetVersion                          func(v *int32) cuResult
	cuDeviceGetCount                            func(n *int32) cuResult
	cuDeviceGet                                 func(dev *int32, ordinal int32) cuResult
	cuDeviceGetName                             func(name *byte, n int32, dev int32) cuResult
	cuDeviceGetAttribute                        func(v *int32, attr int32, dev int32) cuResult
	cuDevicePrimaryCtxRetain                    func(ctx *uintptr, dev int32) cuResult
	cuDevicePrimaryCtxRelease                   func(dev int32) cuResult
	cuCtxSetCurrent                             func(ctx uintptr) cuResult
	cuModuleLoadData                            func(mod *uintptr, image *byte) cuResult
	cuModuleUnload                              func(mod uintptr) cuResult
	cuModuleGetFunction                         func(f *uintptr, mod uintptr, name *byte) cuResult
	cuLaunchKernel                              func(f uintptr, gx, gy, gz, bx, by, bz, shmem uint32, stream uintptr, params *unsafe.Pointer, extra uintptr) cuResult
	cuStreamCreate                              func(s *uintptr, flags uint32) cuResult
	cuStreamDestroy                             func(s uintptr) cuResult
	cuStreamSynchronize                         func(s uintptr) cuResult
	cuStreamQuery                               func(s uintptr) cuResult
	cuMemAlloc                                  func(dptr *uint64, size uintptr) cuResult
	cuMemFree                                   func(dptr uint64) cuResult
	cuMemcpyHtoDAsync                           func(dst uint64, src unsafe.Pointer, n uintptr, s uintptr) cuResult
	cuMemcpyDtoHAsync                           func(dst unsafe.Pointer, src uint64, n uintptr, s uintptr) cuResult
	cuMemsetD8Async                             func(dst uint64, v uint8, n uintptr, s uintptr) cuResult
	cuMemHostAlloc                              func(p *unsafe.Pointer, size uintptr, flags uint32) cuResult
	cuMemFreeHost                               func(p unsafe.Pointer) cuResult
	cuMemHostGetDevicePointer                   func(d *uint64, p unsafe.Pointer, flags uint32) cuResult
	cuMemHostRegister                           func(p unsafe.Pointer, size uintptr, flags uint32) cuResult
	cuMemHostUnregister                         func(p unsafe.Pointer) cuResult
	cuGetErrorName                              func(e cuResult, s *unsafe.Pointer) cuResult
	cuFuncGetAttribute                          func(v *int32, attr int32, f uintptr) cuResult
	cuOccupancyMaxActiveBlocksPerMultiprocessor func(n *int32, f uintptr, blockSize int32, dynSmem uintptr) cuResult
}

// Driver constants (cuda.h).
const (
	cuSuccess          cuResult = 0
	cuErrorNotReady    cuResult = 600
	memHostAllocPort   uint32   = 0x01 // CU_MEMHOSTALLOC_PORTABLE
	memHostAllocMapped uint32   = 0x02 // CU_MEMHOSTALLOC_DEVICEMAP
	memHostAllocWC     uint32   = 0x04 // CU_MEMHOSTALLOC_WRITECOMBINED
	memHostRegPortable uint32   = 0x01 // CU_MEMHOSTREGISTER_PORTABLE
	memHostRegMapped   uint32   = 0x02 // CU_MEMHOSTREGISTER_DEVICEMAP
	streamNonBlocking  uint32   = 0x01 // CU_STREAM_NON_BLOCKING
	attrSMCount        int32    = 16   // CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
	attrCCMajor        int32    = 75   // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
	attrCCMinor        int32    = 76
	attrCanMapHost     int32    = 19 // CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY
	funcAttrNumRegs    int32    = 4  // CU_FUNC_ATTRIBUTE_NUM_REGS
	funcAttrLocalBytes int32    = 3  // CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES
	funcAttrSharedSize int32    = 1  // CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES
)

// errName returns the driver's name for r, e.g. CUDA_ERROR_INVALID_VALUE.
func (d *driver) errName(r cuResult) string {
	var p unsafe.Pointer
	if d.cuGetErrorName(r, &p) != cuSuccess || p == nil {
		return fmt.Sprintf("CUresult %d", r)
	}
	b := unsafe.Slice((*byte)(p), 128)
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// check turns a driver result into an error naming the call.
func (d *driver) check(what string, r cuResult) error {
	if r == cuSuccess {
		return nil
	}
	return fmt.Errorf("%s: %s", what, d.errName(r))
}

// Available reports whether the CUDA backend can run here: nil, or an
// ErrUnavailable error whose message is the one line to print.
func Available() error {
	d, err := loadDriver()
	if err != nil {
		return err
	}
	var n int32
	if r := d.cuDeviceGetCount(&n); r != cuSuccess {
		return unavailable("cuDeviceGetCount: %s", d.errName(r))
	}
	if n == 0 {
		return unavailable("no CUDA device")
	}
	return nil
}
