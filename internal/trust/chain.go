package trust

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// ErrUnsafe is wrapped by every error for a path that another user could
// change under us (a link, a component owned by someone else, a directory
// others may write).
var ErrUnsafe = errors.New("unsafe path")

// Leaf is what a checked path ends in.
type Leaf int

const (
	// Dir: the path is a directory names are made in (a socket's
	// directory, a room).
	Dir Leaf = iota
	// Socket: the path is a unix socket in such a directory.
	Socket
	// File: the path is a regular file in such a directory.
	File
)

func (l Leaf) String() string {
	switch l {
	case Socket:
		return "socket"
	case File:
		return "file"
	}
	return "directory"
}

// Chain says who may own the components of a path.
type Chain struct {
	// Owners are the uids besides root that may own a component (the
	// daemon: its own; a client: its own).
	Owners []int
	// Delegate accepts one more owner: a directory owned by another uid
	// whose parent is owned by root or an Owner and writable by nobody
	// else, so that only they could have made it. That uid may own the
	// components below it too. A client uses it to trust the daemon's
	// user without knowing it beforehand.
	Delegate bool
}

// Checked is what a successful Check found.
type Checked struct {
	Path string
	// Stat is the last component's lstat.
	Stat syscall.Stat_t
	// Trusted are the uids that may own the path's components: root, the
	// Owners, and the delegated uid if one was.
	Trusted []int
}

// Check walks path's components from / down with lstat and refuses the
// first one another user could change (see the package doc). path must
// be absolute and clean (filepath.Clean leaves it as it is): a ".."
// resolved by the kernel after a link is not what a lexical walk sees.
func (c Chain) Check(path string, leaf Leaf) (Checked, error) {
	return c.walk(path, leaf, nil)
}

// MkdirChain is Check for a directory path that makes the components that
// do not exist yet, each in a parent already checked: intermediate ones
// mode 0755, the last one mode (its permission and setgid bits) with
// group gid when gid >= 0. A component that appears between the lstat and
// the mkdir is checked like any other.
func (c Chain) MkdirChain(path string, mode uint32, gid int) (Checked, error) {
	return c.walk(path, Dir, func(p string, last bool) error {
		m := uint32(0o755)
		if last {
			m = mode
		}
		if err := syscall.Mkdir(p, m&0o777); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("mkdir %s: %w", p, err)
		} else if err != nil {
			return nil // someone else's: the walk checks it
		}
		// The umask took bits off, and mkdir ignores setgid on some
		// filesystems: set both as asked. The parent was checked, so
		// nobody but root or us can swap p in between.
		if last && gid >= 0 {
			if err := os.Lchown(p, -1, gid); err != nil {
				return fmt.Errorf("%s: set group %d: %w", p, gid, err)
			}
		}
		if err := syscall.Chmod(p, m); err != nil {
			return fmt.Errorf("chmod %s: %w", p, err)
		}
		return nil
	})
}

func (c Chain) walk(path string, leaf Leaf, mkdir func(p string, last bool) error) (Checked, error) {
	if !filepath.IsAbs(path) || filepath.Clean(path) != path {
		return Checked{}, fmt.Errorf("%q: want a clean absolute path (no '.', '..', '//' or trailing '/')", clip(path))
	}
	trusted := append([]int{0}, c.Owners...)
	delegated := false
	comps := components(path)
	var parent syscall.Stat_t
	for i, p := range comps {
		last := i == len(comps)-1
		var st syscall.Stat_t
		err := syscall.Lstat(p, &st)
		if errors.Is(err, fs.ErrNotExist) && mkdir != nil {
			if err = mkdir(p, last); err != nil {
				return Checked{}, err
			}
			err = syscall.Lstat(p, &st)
		}
		if err != nil {
			return Checked{}, &fs.PathError{Op: "lstat", Path: p, Err: err}
		}
		mode := st.Mode & syscall.S_IFMT
		switch {
		case mode == syscall.S_IFLNK:
			return Checked{}, fmt.Errorf("%w: %s is a symbolic link%s: a link can be repointed; %s", ErrUnsafe, p, linkTarget(p), realPathHint(p, path))
		case last && leaf == Socket && mode != syscall.S_IFSOCK:
			return Checked{}, fmt.Errorf("%w: %s is a %s, not a socket", ErrUnsafe, p, typeName(mode))
		case last && leaf == File && mode != syscall.S_IFREG:
			return Checked{}, fmt.Errorf("%w: %s is a %s, not a regular file", ErrUnsafe, p, typeName(mode))
		case (!last || leaf == Dir) && mode != syscall.S_IFDIR:
			return Checked{}, fmt.Errorf("%w: %s is a %s, not a directory", ErrUnsafe, p, typeName(mode))
		}
		uid := int(st.Uid)
		if !slices.Contains(trusted, uid) {
			// Delegation: a directory only root or an owner could have
			// made (its parent is theirs and writable by nobody else).
			if c.Delegate && !delegated && i > 0 && mode == syscall.S_IFDIR &&
				parent.Mode&0o022 == 0 && slices.Contains(append([]int{0}, c.Owners...), int(parent.Uid)) {
				trusted = append(trusted, uid)
				delegated = true
			} else {
				return Checked{}, fmt.Errorf("%w: %s is owned by %s, not %s: that user could replace what is below it; chown it to root or pick a %s that root owns (such as /run/warpflow)",
					ErrUnsafe, p, userName(uid), ownersName(trusted), leaf)
			}
		}
		// The directory names are made in: nobody else may write it,
		// sticky or not (they could take the name first).
		room := (last && leaf == Dir) || (i == len(comps)-2 && leaf != Dir)
		if mode == syscall.S_IFDIR && st.Mode&0o022 != 0 {
			sticky := st.Mode&syscall.S_ISVTX != 0
			switch {
			case room:
				return Checked{}, fmt.Errorf("%w: %s is writable by %s (mode %04o): another user could put their own file there first or replace ours; chmod go-w %s, or use a directory of its own such as /run/warpflow",
					ErrUnsafe, p, writers(st.Mode), st.Mode&0o7777, p)
			case !sticky:
				return Checked{}, fmt.Errorf("%w: %s is writable by %s without the sticky bit (mode %04o): another user could rename %s and put their own in its place; chmod go-w %s",
					ErrUnsafe, p, writers(st.Mode), st.Mode&0o7777, comps[i+1], p)
			}
			// Sticky and owned by root or us (checked above): others may
			// add names but not replace ours; the next component's owner
			// check refuses theirs.
		}
		parent = st
		if last {
			return Checked{Path: path, Stat: st, Trusted: trusted}, nil
		}
	}
	return Checked{}, fmt.Errorf("%q: no components", path) // components returns at least "/"
}

// Reachable checks that the members of group gid can search every
// directory of path's chain (path itself included when it is a
// directory), naming the first one they cannot.
func Reachable(path string, gid int) error {
	for _, p := range components(path) {
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err != nil {
			return &fs.PathError{Op: "stat", Path: p, Err: err}
		}
		if st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
			continue
		}
		if st.Mode&0o001 != 0 || int(st.Gid) == gid && st.Mode&0o010 != 0 {
			continue
		}
		return fmt.Errorf("members of group %s cannot reach %s: %s is %s:%s mode %04o (they need search permission: chgrp %s %s and chmod g+x, or chmod o+x)",
			groupName(gid), path, p, userName(int(st.Uid)), groupName(int(st.Gid)), st.Mode&0o7777, groupName(gid), p)
	}
	return nil
}

// components returns "/", "/a", "/a/b", ... for a clean absolute path.
func components(path string) []string {
	out := []string{"/"}
	if path == "/" {
		return out
	}
	for i := 1; i < len(path); i++ {
		if path[i] == '/' {
			out = append(out, path[:i])
		}
	}
	return append(out, path)
}

func linkTarget(p string) string {
	if t, err := os.Readlink(p); err == nil {
		return fmt.Sprintf(" (to %q)", clip(t))
	}
	return ""
}

// realPathHint suggests path with its link p resolved.
func realPathHint(p, path string) string {
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return fmt.Sprintf("use the real path %s if its directories are safe, or a directory of its own", r+path[len(p):])
	}
	return "use a path without links"
}

func typeName(mode uint32) string {
	switch mode {
	case syscall.S_IFDIR:
		return "directory"
	case syscall.S_IFREG:
		return "regular file"
	case syscall.S_IFSOCK:
		return "socket"
	case syscall.S_IFIFO:
		return "FIFO"
	case syscall.S_IFCHR:
		return "character device"
	case syscall.S_IFBLK:
		return "block device"
	case syscall.S_IFLNK:
		return "symbolic link"
	}
	return "special file"
}

func writers(mode uint32) string {
	switch {
	case mode&0o022 == 0o022:
		return "group and others"
	case mode&0o002 != 0:
		return "others"
	}
	return "its group"
}

func userName(uid int) string {
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		return fmt.Sprintf("uid %d (%s)", uid, u.Username)
	}
	return fmt.Sprintf("uid %d", uid)
}

func groupName(gid int) string {
	if g, err := user.LookupGroupId(strconv.Itoa(gid)); err == nil {
		return g.Name
	}
	return strconv.Itoa(gid)
}

// ownersName lists the trusted owners: "root" or "root or uid 1000 (me)".
func ownersName(owners []int) string {
	names := []string{"root"}
	for _, o := range owners {
		if o != 0 && !slices.Contains(names, userName(o)) {
			names = append(names, userName(o))
		}
	}
	return strings.Join(names, " or ")
}

// clip cuts s to a short prefix for an error message.
func clip(s string) string {
	const n = 96
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && s[cut]&0xc0 == 0x80 {
		cut--
	}
	return fmt.Sprintf("%s...(%d bytes)", s[:cut], len(s))
}
