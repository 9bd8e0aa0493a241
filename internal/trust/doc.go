// Package trust is the control plane's trust model: every name a client
// gives lands in a room. It answers three questions and nothing else.
//
// Can this path be trusted? Chain.Check walks every component of a clean
// absolute path from / down with lstat (never following a link): no
// component may be a symlink, each must be owned by root or a trusted uid,
// and none may be writable by group or others unless it is a sticky
// directory owned by root or a trusted uid (others may add names to it but
// not replace ours, and the owner check refuses the names they add). The
// directory that names are made in (the socket's, a capture room) may not
// be writable by others at all, sticky or not: another user could take a
// name first. A client that does not know the daemon's uid sets Delegate:
// a directory that only root (or the client itself) could have made, owned
// by another uid, hands the subtree below to that uid (systemd's
// RuntimeDirectory under DynamicUser is exactly that). MkdirChain makes the
// missing components of a path under the same checks, one at a time, so
// nothing is ever created through a link.
//
// Where does a client's name go? A Room is one directory the daemon owns,
// opened once as a directory file descriptor (openat2 with
// RESOLVE_NO_SYMLINKS|RESOLVE_NO_MAGICLINKS, its identity compared with
// what the walk checked). Files are made beneath it with openat2
// (RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|RESOLVE_NO_MAGICLINKS) and
// O_CREAT|O_EXCL|O_NOFOLLOW, from a NAME that ValidName accepts (one
// component of a small alphabet, bounded): never a path, so no '..', no
// absolute path, no link, no existing file and no FIFO can take the write
// outside the room or onto something already there.
//
// Who is the peer? PeerCred reads a unix socket peer's uid, gid and pid
// (SO_PEERCRED) and all its groups as the kernel recorded them at connect
// time (SO_PEERGROUPS, Linux >= 4.13), which the peer cannot change later
// and which does not depend on its pid still naming it. Only where the
// kernel lacks SO_PEERGROUPS does it read /proc/PID/status, and then it
// accepts the groups only if that process still has the peer's uid; a pid
// reused by another process of the same uid is the race left there.
//
// # Why x/sys/unix and unsafe here
//
// The design keeps x/sys/unix and unsafe at the kernel boundary (xdp/,
// gpu/, internal/cpuaffinity). This package is the control plane's
// boundary with the kernel's own access checks: openat2 has no syscall
// package wrapper, and SO_PEERGROUPS returns an array of gid_t that
// unix.GetsockoptString would cut at the first zero byte, so one raw
// getsockopt reads it. Nothing else here needs either.
package trust
