// Package meminfo says how much memory this process can still take: the
// kernel's estimate of what can be allocated without swapping
// (MemAvailable in /proc/meminfo) and, where the process runs in a cgroup
// with a memory limit (v2 memory.max: a systemd MemoryMax=, a container's
// limit; v1 memory.limit_in_bytes on hybrid and legacy hosts), the room
// left under that limit, whichever is smaller. The dataplane checks
// a pipeline's per-worker tables against it before it allocates them, so
// that a table too big for the machine is a clear error and not the
// kernel's OOM killer or the Go runtime's fatal "out of memory".
package meminfo
