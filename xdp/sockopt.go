package xdp

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// The AF_XDP socket options take structs x/sys/unix has types for but no
// Getsockopt/Setsockopt wrappers; these go through the raw syscalls.

func getsockopt(fd, level, name int, val unsafe.Pointer, size uintptr) (uintptr, error) {
	l := uint32(size)
	_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), uintptr(level), uintptr(name),
		uintptr(val), uintptr(unsafe.Pointer(&l)), 0)
	if e != 0 {
		return 0, e
	}
	return uintptr(l), nil
}

func setsockopt(fd, level, name int, val unsafe.Pointer, size uintptr) error {
	_, _, e := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), uintptr(level), uintptr(name),
		uintptr(val), size, 0)
	if e != 0 {
		return e
	}
	return nil
}

func mmapOffsets(fd int) (unix.XDPMmapOffsets, error) {
	var off unix.XDPMmapOffsets
	_, err := getsockopt(fd, unix.SOL_XDP, unix.XDP_MMAP_OFFSETS, unsafe.Pointer(&off), unsafe.Sizeof(off))
	return off, err
}

func registerUMEM(fd int, mem []byte, frameSize, headroom int) error {
	reg := unix.XDPUmemReg{
		Addr:     uint64(uintptr(unsafe.Pointer(unsafe.SliceData(mem)))),
		Len:      uint64(len(mem)),
		Size:     uint32(frameSize),
		Headroom: uint32(headroom),
	}
	return setsockopt(fd, unix.SOL_XDP, unix.XDP_UMEM_REG, unsafe.Pointer(&reg), unsafe.Sizeof(reg))
}

func xdpOptions(fd int) (uint32, error) {
	var v uint32
	_, err := getsockopt(fd, unix.SOL_XDP, unix.XDP_OPTIONS, unsafe.Pointer(&v), unsafe.Sizeof(v))
	return v, err
}

func xdpStatistics(fd int) (unix.XDPStatistics, error) {
	var st unix.XDPStatistics
	_, err := getsockopt(fd, unix.SOL_XDP, unix.XDP_STATISTICS, unsafe.Pointer(&st), unsafe.Sizeof(st))
	return st, err
}
