//go:build !nocuda

package gpu

import (
	"os"
	"runtime"
	"sync"

	"github.com/ebitengine/purego"
)

// The driver is opened with purego, which under CGO_ENABLED=0 still links
// the binary against the C loader and libc (its fakecgo): such a binary is
// not static. Builds that must be static (the OCI image from scratch,
// which has no libc and no libcuda either) use -tags nocuda, and get
// driver_nocuda.go instead: the same API, the backend always unavailable.

var (
	drvOnce sync.Once
	drv     *driver
	drvErr  error
)

// loadDriver opens libcuda.so.1 once per process.
func loadDriver() (*driver, error) {
	drvOnce.Do(func() {
		if runtime.GOOS != "linux" {
			drvErr = unavailable("the CUDA backend is built for linux only")
			return
		}
		// Lazy module loading can deadlock against a kernel that never
		// finishes: loading code later waits for the device to go idle.
		if os.Getenv("CUDA_MODULE_LOADING") == "" {
			os.Setenv("CUDA_MODULE_LOADING", "EAGER")
		}
		lib, err := purego.Dlopen("libcuda.so.1", purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err != nil {
			drvErr = unavailable("%v", err)
			return
		}
		d := &driver{}
		syms := []struct {
			fn   any
			name string
		}{
			{&d.cuInit, "cuInit"}, {&d.cuDriverGetVersion, "cuDriverGetVersion"},
			{&d.cuDeviceGetCount, "cuDeviceGetCount"}, {&d.cuDeviceGet, "cuDeviceGet"},
			{&d.cuDeviceGetName, "cuDeviceGetName"}, {&d.cuDeviceGetAttribute, "cuDeviceGetAttribute"},
			{&d.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain"},
			{&d.cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2"},
			{&d.cuCtxSetCurrent, "cuCtxSetCurrent"},
			{&d.cuModuleLoadData, "cuModuleLoadData"}, {&d.cuModuleUnload, "cuModuleUnload"},
			{&d.cuModuleGetFunction, "cuModuleGetFunction"}, {&d.cuLaunchKernel, "cuLaunchKernel"},
			{&d.cuStreamCreate, "cuStreamCreate"}, {&d.cuStreamDestroy, "cuStreamDestroy_v2"},
			{&d.cuStreamSynchronize, "cuStreamSynchronize"}, {&d.cuStreamQuery, "cuStreamQuery"},
			{&d.cuMemAlloc, "cuMemAlloc_v2"}, {&d.cuMemFree, "cuMemFree_v2"},
			{&d.cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2"}, {&d.cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2"},
			{&d.cuMemsetD8Async, "cuMemsetD8Async"},
			{&d.cuMemHostAlloc, "cuMemHostAlloc"}, {&d.cuMemFreeHost, "cuMemFreeHost"},
			{&d.cuMemHostGetDevicePointer, "cuMemHostGetDevicePointer_v2"},
			{&d.cuMemHostRegister, "cuMemHostRegister_v2"}, {&d.cuMemHostUnregister, "cuMemHostUnregister"},
			{&d.cuGetErrorName, "cuGetErrorName"}, {&d.cuFuncGetAttribute, "cuFuncGetAttribute"},
			{&d.cuOccupancyMaxActiveBlocksPerMultiprocessor, "cuOccupancyMaxActiveBlocksPerMultiprocessor"},
		}
		for _, s := range syms {
			if _, err := purego.Dlsym(lib, s.name); err != nil {
				drvErr = unavailable("libcuda.so.1 lacks %s", s.name)
				return
			}
			purego.RegisterLibFunc(s.fn, lib, s.name)
		}
		if r := d.cuInit(0); r != cuSuccess {
			drvErr = unavailable("cuInit: %s", d.errName(r))
			return
		}
		drv = d
	})
	return drv, drvErr
}
