// Package cpuaffinity binds OS threads to CPUs and reads back where they
// may run. It is the module's one home for sched_setaffinity(2) and
// sched_getaffinity(2): workers pin their threads through it, the
// daemon's I/O loops through workers.PinCurrentGoroutine, and the
// benchmarks pin themselves, other processes and the kernel's NAPI
// threads through it. One mask type, one range limit and one wording of
// errors, instead of one per caller; internal/archtest keeps it that way.
//
// # What is pinned
//
// Linux affinity belongs to a thread (a task), not to a process:
//
//   - PinThread binds the calling OS thread only. A goroutine must hold
//     runtime.LockOSThread before it calls PinThread and must never
//     unlock afterwards: an unlocked thread goes back to the runtime,
//     which would then run any goroutine on the odd mask. A locked
//     goroutine that exits takes its thread with it.
//   - PinTask binds one thread named by its thread id, of this process or
//     another (a kernel thread such as napi/dp0-8195 too, where the
//     caller is allowed to).
//   - PinProcess binds every thread of a process, listed from
//     /proc/PID/task.
//
// # Inheritance
//
// A new thread starts with the mask of the thread that made it, and a
// child process with the mask of the thread that forked it. So after
// PinProcess every thread the process makes later stays on the CPU too,
// and so do the children it starts, unless they pin themselves. The
// other way round, PinThread on a locked thread does not leak into the
// runtime's later threads: the Go runtime makes new threads from an
// unlocked thread or from its template thread, never from a thread a
// goroutine holds locked. PinProcess lists the threads again after
// pinning them, so a thread made meanwhile by one not yet pinned is
// pinned too (a bounded number of passes; a process that keeps making
// threads faster than that gets an error).
//
// # Limits and errors
//
// CPUs are numbered 0 to MaxCPU-1 (4096 CPUs, a cpu_set_t of 512 bytes,
// beyond any nr_cpu_ids we are likely to meet). A number outside that
// range is refused before any system call with an error that names the
// CPU and wraps ErrCPURange. A CPU in range that the kernel will not
// grant (offline, outside the cgroup's cpuset, beyond nr_cpu_ids) comes
// back as the kernel's EINVAL, again naming the CPU ("pin to cpu 4095:
// sched_setaffinity: invalid argument"); errors.Is finds the errno.
// On anything but Linux every call that would pin or read returns an
// error wrapping ErrNotSupported, and Supported is false; CheckCPU works
// everywhere.
//
// Nothing here is on a hot path: each call makes one or two system calls
// and the readers allocate their result. Pin once, at a goroutine's
// start.
package cpuaffinity
