// Package capset reads Linux capability sets by name: a process's
// effective, permitted, bounding and ambient sets from /proc/PID/status
// (the kernel's own account, which holds for a process in a container as
// for any other), and the names of the bits, CAP_ prefixed as systemd
// and capabilities(7) write them. warpctl doctor reports what it holds
// with it, and the container test checks what the containerised daemon
// holds.
package capset
