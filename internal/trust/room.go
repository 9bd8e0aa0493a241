package trust

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// MaxNameLen bounds a name a client gives for a file in a room.
const MaxNameLen = 128

// ErrBadName is wrapped by ValidName's errors.
var ErrBadName = errors.New("bad name")

// ValidName checks a name a client gives for a file in a room: 1 to
// MaxNameLen bytes of letters, digits and . _ - + , = @ :, not starting
// with '.' (so never "." or ".."). A '/' anywhere means the client gave a
// path, which is refused, not resolved.
func ValidName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty: want a file name", ErrBadName)
	case strings.Contains(name, "/"):
		return fmt.Errorf("%w: %q: want a file name, not a path (no '/')", ErrBadName, clip(name))
	case len(name) > MaxNameLen:
		return fmt.Errorf("%w: %q: longer than %d bytes", ErrBadName, clip(name), MaxNameLen)
	}
	for i := 0; i < len(name); i++ {
		switch c := name[i]; {
		case c == 0:
			return fmt.Errorf("%w: %q: contains a NUL byte", ErrBadName, clip(name))
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9',
			c == '_', c == '-', c == '+', c == ',', c == '=', c == '@', c == ':':
		case c == '.':
			if i == 0 {
				return fmt.Errorf("%w: %q: must not start with '.'", ErrBadName, clip(name))
			}
		default:
			return fmt.Errorf("%w: %q: byte %#02x at %d: only letters, digits and . _ - + , = @ : are allowed", ErrBadName, clip(name), c, i)
		}
	}
	return nil
}

// RoomOptions says who may own a room's path and how to make it.
type RoomOptions struct {
	Chain Chain
	// Mode is the permission bits of the room when it has to be made
	// (0750 if zero); with GID >= 0 the room is made with that group and
	// setgid, so the files made in it take its group.
	Mode uint32
	GID  int
}

// Room is one directory the daemon owns, held open; files are made
// beneath it by name only. Close it when done.
type Room struct {
	dir string
	fd  int
}

// OpenRoom checks dir's chain (making the missing components), opens it
// without following any link and checks that what it opened is what the
// walk checked.
func OpenRoom(dir string, o RoomOptions) (*Room, error) {
	mode := o.Mode
	if mode == 0 {
		mode = 0o750
	}
	if o.GID >= 0 {
		mode |= unix.S_ISGID
	}
	ck, err := o.Chain.MkdirChain(dir, mode, o.GID)
	if err != nil {
		return nil, err
	}
	fd, err := openat2(unix.AT_FDCWD, dir, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", dir, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("stat %s: %w", dir, err)
	}
	if st.Dev != ck.Stat.Dev || st.Ino != ck.Stat.Ino {
		unix.Close(fd)
		return nil, fmt.Errorf("%w: %s changed while it was being checked", ErrUnsafe, dir)
	}
	return &Room{dir: dir, fd: fd}, nil
}

// Dir is the room's path.
func (r *Room) Dir() string { return r.dir }

// Path is where name is in the room.
func (r *Room) Path(name string) string { return filepath.Join(r.dir, name) }

// Close closes the room's descriptor (files made in it stay open).
func (r *Room) Close() error {
	if r.fd < 0 {
		return os.ErrClosed
	}
	err := unix.Close(r.fd)
	r.fd = -1
	return err
}

// Create makes a new file name in the room for writing, mode perm
// exactly (the umask does not apply). It refuses a name ValidName
// refuses, and a name that exists in any form (file, link, FIFO,
// directory): fs.ErrExist.
func (r *Room) Create(name string, perm uint32) (*os.File, error) {
	if err := ValidName(name); err != nil {
		return nil, err
	}
	fd, err := openat2(r.fd, name, &unix.OpenHow{
		Flags:   unix.O_WRONLY | unix.O_CREAT | unix.O_EXCL | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Mode:    uint64(perm & 0o777),
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return nil, &fs.PathError{Op: "create", Path: r.Path(name), Err: err}
	}
	if err := unix.Fchmod(fd, perm&0o777); err != nil {
		unix.Close(fd)
		unix.Unlinkat(r.fd, name, 0)
		return nil, &fs.PathError{Op: "chmod", Path: r.Path(name), Err: err}
	}
	return os.NewFile(uintptr(fd), r.Path(name)), nil
}

// Open opens an existing regular file name in the room for reading,
// without following a link; the caller checks its owner and mode on the
// returned file (Stat).
func (r *Room) Open(name string) (*os.File, error) {
	if err := ValidName(name); err != nil {
		return nil, err
	}
	fd, err := openat2(r.fd, name, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: r.Path(name), Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		if err == nil {
			err = fmt.Errorf("%w: not a regular file", ErrUnsafe)
		}
		return nil, &fs.PathError{Op: "open", Path: r.Path(name), Err: err}
	}
	return os.NewFile(uintptr(fd), r.Path(name)), nil
}

// Remove removes name from the room (a file made by Create that is not
// wanted after all).
func (r *Room) Remove(name string) error {
	if err := ValidName(name); err != nil {
		return err
	}
	if err := unix.Unlinkat(r.fd, name, 0); err != nil {
		return &fs.PathError{Op: "remove", Path: r.Path(name), Err: err}
	}
	return nil
}

// Rename renames from to to in the room, replacing a file to (never
// following a link: a link named to is replaced, not its target); both
// are names ValidName takes. A missing from is fs.ErrNotExist.
func (r *Room) Rename(from, to string) error {
	if err := ValidName(from); err != nil {
		return err
	}
	if err := ValidName(to); err != nil {
		return err
	}
	if err := unix.Renameat(r.fd, from, r.fd, to); err != nil {
		return &fs.PathError{Op: "rename", Path: r.Path(from), Err: err}
	}
	return nil
}

// openat2 retries the EAGAIN the kernel returns when a rename raced the
// resolution, a bounded number of times; ENOSYS means a kernel older than
// 5.6, which the daemon does not support.
func openat2(dirfd int, path string, how *unix.OpenHow) (int, error) {
	for range 8 {
		fd, err := unix.Openat2(dirfd, path, how)
		switch {
		case err == nil:
			return fd, nil
		case errors.Is(err, unix.EAGAIN), errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.ENOSYS):
			return -1, fmt.Errorf("openat2: %w (needs Linux >= 5.6)", err)
		case errors.Is(err, unix.ELOOP), errors.Is(err, unix.EXDEV):
			return -1, fmt.Errorf("%w: resolving it would follow a link or leave the directory (%w)", ErrUnsafe, err)
		default:
			return -1, err
		}
	}
	return -1, fmt.Errorf("openat2: %w (renames kept racing the lookup)", unix.EAGAIN)
}
