package trust_test

import (
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/warpflow/warpflow/internal/trust"
	"golang.org/x/sys/unix"
)

// requireRoot skips (failing under CI=true, which runs as root) a test
// that needs to chown to another user.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("needs root to give files to another user, and CI runs as root")
	}
	t.Skip("needs root: gives files to another user")
}

// base is a private directory under the system's temporary directory
// (sticky, root's), checked clean.
func base(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "wftrust-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func me() trust.Chain { return trust.Chain{Owners: []int{os.Geteuid()}} }

func wantUnsafe(t *testing.T, what string, err error, names string) {
	t.Helper()
	if !errors.Is(err, trust.ErrUnsafe) || !strings.Contains(err.Error(), names) {
		t.Fatalf("%s: got %v, want an unsafe-path error naming %s", what, err, names)
	}
}

func TestChainAccepts(t *testing.T) {
	d := base(t)
	sub := filepath.Join(d, "ok")
	if err := os.Mkdir(sub, 0o750); err != nil {
		t.Fatal(err)
	}
	if _, err := me().Check(sub, trust.Dir); err != nil {
		t.Fatalf("a private directory under %s: %v", os.TempDir(), err)
	}
	// A socket in it.
	ln, err := net.Listen("unix", filepath.Join(sub, "s.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if _, err := me().Check(filepath.Join(sub, "s.sock"), trust.Socket); err != nil {
		t.Fatalf("socket: %v", err)
	}
	if _, err := me().Check(filepath.Join(sub, "nope.sock"), trust.Socket); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing socket: %v", err)
	}
	for _, bad := range []string{"relative", sub + "/", sub + "/../ok", sub + "//x", sub + "/./x"} {
		if _, err := me().Check(bad, trust.Dir); err == nil || !strings.Contains(err.Error(), "clean absolute path") {
			t.Errorf("%q: %v, want refused as not clean", bad, err)
		}
	}
}

// TestChainRefusesIssueBypasses: the bypasses of issue 18 item 5, each
// refused naming the component at fault.
func TestChainRefusesIssueBypasses(t *testing.T) {
	d := base(t)
	// A 0750 directory under a 0777 one: the 0777 one lets anyone rename
	// the 0750 one away and put their own in its place.
	open := filepath.Join(d, "open")
	os.Mkdir(open, 0o777)
	os.Chmod(open, 0o777)
	inner := filepath.Join(open, "inner")
	os.Mkdir(inner, 0o750)
	_, err := me().Check(inner, trust.Dir)
	wantUnsafe(t, "0750 under 0777", err, open+" is writable by group and others without the sticky bit")

	// The socket's own directory: sticky or not, nobody else may write it.
	sticky := filepath.Join(d, "sticky")
	os.Mkdir(sticky, 0o777)
	os.Chmod(sticky, 0o777|fs.ModeSticky)
	_, err = me().Check(filepath.Join(sticky, "s.sock"), trust.Socket)
	wantUnsafe(t, "socket in a sticky 0777 dir", err, sticky+" is writable by group and others")

	// A group-writable ancestor.
	gw := filepath.Join(d, "gw")
	os.Mkdir(gw, 0o770)
	os.Chmod(gw, 0o770)
	os.Mkdir(filepath.Join(gw, "x"), 0o700)
	_, err = me().Check(filepath.Join(gw, "x"), trust.Dir)
	wantUnsafe(t, "group-writable ancestor", err, gw+" is writable by its group")

	// A link anywhere on the way, even to a good directory.
	good := filepath.Join(d, "good")
	os.Mkdir(good, 0o700)
	link := filepath.Join(d, "link")
	os.Symlink(good, link)
	_, err = me().Check(filepath.Join(link, "s.sock"), trust.Socket)
	wantUnsafe(t, "link to a good dir", err, link+" is a symbolic link")
	if !strings.Contains(err.Error(), "real path "+good) {
		t.Fatalf("no real-path hint: %v", err)
	}
	// The leaf itself a link.
	os.Symlink(good, filepath.Join(good, "self"))
	_, err = me().Check(filepath.Join(good, "self"), trust.Dir)
	wantUnsafe(t, "leaf link", err, "self is a symbolic link")

	if os.Geteuid() != 0 {
		return
	}
	// As root: a parent that is a link owned by another user in a 0777
	// directory, and the same in /tmp (sticky) itself.
	theirLink := filepath.Join(open, "theirs")
	os.Symlink(good, theirLink)
	os.Lchown(theirLink, 65534, 65534)
	_, err = me().Check(filepath.Join(theirLink, "s.sock"), trust.Socket)
	wantUnsafe(t, "their link in 0777", err, open+" is writable")
	tmpLink := filepath.Join(os.TempDir(), filepath.Base(d)+"-theirs")
	os.Symlink(good, tmpLink)
	os.Lchown(tmpLink, 65534, 65534)
	defer os.Remove(tmpLink)
	_, err = me().Check(filepath.Join(tmpLink, "s.sock"), trust.Socket)
	wantUnsafe(t, "their link in /tmp", err, tmpLink+" is a symbolic link")
	// Their directory in /tmp: refused by owner, delegation or not
	// (they could have made it: /tmp is writable by them).
	tmpDir := filepath.Join(os.TempDir(), filepath.Base(d)+"-theirdir")
	os.Mkdir(tmpDir, 0o755)
	os.Chown(tmpDir, 65534, 65534)
	defer os.Remove(tmpDir)
	for _, c := range []trust.Chain{me(), {Owners: []int{0}, Delegate: true}} {
		_, err = c.Check(tmpDir, trust.Dir)
		wantUnsafe(t, "their dir in /tmp", err, tmpDir+" is owned by uid 65534")
	}
}

// TestChainDelegation: a client trusts a directory that only root could
// have made for another user (a DynamicUser's RuntimeDirectory), and
// that user's socket in it; but not a second user below it.
func TestChainDelegation(t *testing.T) {
	requireRoot(t)
	d := base(t)
	rt := filepath.Join(d, "run") // root's, 0755: only root makes names here
	os.Mkdir(rt, 0o755)
	svc := filepath.Join(rt, "svc")
	os.Mkdir(svc, 0o750)
	os.Chown(svc, 61234, 61234)
	client := trust.Chain{Owners: []int{0}, Delegate: true}
	ck, err := client.Check(svc, trust.Dir)
	if err != nil || !slices.Contains(ck.Trusted, 61234) {
		t.Fatalf("delegated directory: %+v %v", ck, err)
	}
	// The daemon itself does not delegate.
	_, err = me().Check(svc, trust.Dir)
	wantUnsafe(t, "no delegation for the daemon", err, "owned by uid 61234")
	// A second user below the first: refused.
	deeper := filepath.Join(svc, "deeper")
	os.Mkdir(deeper, 0o700)
	os.Chown(deeper, 61235, 61235)
	_, err = client.Check(deeper, trust.Dir)
	wantUnsafe(t, "second delegation", err, "owned by uid 61235")
	// Delegation from a directory others may write: refused.
	open := filepath.Join(d, "open")
	os.Mkdir(open, 0o755)
	os.Chmod(open, 0o775)
	theirs := filepath.Join(open, "theirs")
	os.Mkdir(theirs, 0o700)
	os.Chown(theirs, 61234, 61234)
	_, err = client.Check(theirs, trust.Dir)
	wantUnsafe(t, "delegation from a writable dir", err, open+" is writable by its group")
}

func TestMkdirChain(t *testing.T) {
	d := base(t)
	p := filepath.Join(d, "a", "b", "room")
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	gid := os.Getegid()
	if _, err := me().MkdirChain(p, 0o750|syscall.S_ISGID, gid); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]fs.FileMode{filepath.Join(d, "a"): 0o755, filepath.Join(d, "a", "b"): 0o755, p: 0o750 | fs.ModeSetgid} {
		fi, err := os.Lstat(path)
		if err != nil || fi.Mode()&(fs.ModePerm|fs.ModeSetgid) != want {
			t.Errorf("%s: %v %v, want %v", path, fi.Mode(), err, want)
		}
	}
	// Nothing is made through a link: the link is refused before.
	elsewhere := filepath.Join(d, "elsewhere")
	os.Mkdir(elsewhere, 0o700)
	os.Symlink(elsewhere, filepath.Join(d, "via"))
	_, err := me().MkdirChain(filepath.Join(d, "via", "room"), 0o750, -1)
	wantUnsafe(t, "mkdir through a link", err, "via is a symbolic link")
	if _, err := os.Lstat(filepath.Join(elsewhere, "room")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a directory was made through the link: %v", err)
	}
}

func TestReachable(t *testing.T) {
	d := base(t)
	os.Chmod(d, 0o700)
	p := filepath.Join(d, "x")
	os.Mkdir(p, 0o750)
	if err := trust.Reachable(p, 4242); err == nil || !strings.Contains(err.Error(), d+" is") {
		t.Fatalf("0700 ancestor: %v", err)
	}
	os.Chmod(d, 0o711)
	if err := trust.Reachable(p, 4242); err == nil || !strings.Contains(err.Error(), p+" is") {
		t.Fatalf("0750 leaf of another group: %v", err)
	}
	if os.Geteuid() == 0 {
		os.Chown(p, 0, 4242)
		if err := trust.Reachable(p, 4242); err != nil {
			t.Fatalf("0750 root:4242 under 0711: %v", err)
		}
	}
}

func TestValidName(t *testing.T) {
	for _, ok := range []string{"a.pcap", "acl-2024-01-01T10:00+01.pcap", "x", strings.Repeat("a", trust.MaxNameLen), "a..b", "A_b=c,d@e"} {
		if err := trust.ValidName(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", ".", "..", ".hidden", "../../etc/x", "/tmp/a/../../etc/x", "/etc/x", "a/b", "a\x00b", "a b", "a\nb", "é", strings.Repeat("a", trust.MaxNameLen+1)} {
		err := trust.ValidName(bad)
		if !errors.Is(err, trust.ErrBadName) {
			t.Errorf("%q accepted (%v)", bad, err)
		} else if len(err.Error()) > 300 {
			t.Errorf("%q: error echoes too much: %d bytes", bad, len(err.Error()))
		}
	}
}

// TestRoomAttacks: whatever name a client gives, nothing is made outside
// the room and nothing there is written over.
func TestRoomAttacks(t *testing.T) {
	d := base(t)
	outside := filepath.Join(d, "outside")
	os.Mkdir(outside, 0o700)
	dir := filepath.Join(d, "captures")
	r, err := trust.OpenRoom(dir, trust.RoomOptions{Chain: me(), GID: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if fi, err := os.Lstat(dir); err != nil || fi.Mode().Perm() != 0o750 {
		t.Fatalf("room made %v %v, want 0750", fi.Mode(), err)
	}
	// Planted in the room: a link to outside, a FIFO, a file, a dir.
	os.Symlink(filepath.Join(outside, "target"), filepath.Join(dir, "link.pcap"))
	syscall.Mkfifo(filepath.Join(dir, "fifo.pcap"), 0o600)
	os.WriteFile(filepath.Join(dir, "old.pcap"), []byte("keep"), 0o600)
	os.Mkdir(filepath.Join(dir, "sub"), 0o700)
	for _, name := range []string{"../outside/x", "../../etc/x", "/tmp/a/../../etc/x", filepath.Join(outside, "abs"), "sub/x", "..", ".", ""} {
		if f, err := r.Create(name, 0o640); err == nil || !errors.Is(err, trust.ErrBadName) {
			if f != nil {
				f.Close()
			}
			t.Errorf("%q: %v, want refused as a bad name", name, err)
		}
	}
	for _, name := range []string{"link.pcap", "fifo.pcap", "old.pcap", "sub"} {
		f, err := r.Create(name, 0o640)
		if err == nil {
			f.Close()
			t.Errorf("%q: created over what was there", name)
			continue
		}
		if !errors.Is(err, fs.ErrExist) && !errors.Is(err, trust.ErrUnsafe) {
			t.Errorf("%q: %v, want exists or unsafe", name, err)
		}
	}
	if data, _ := os.ReadFile(filepath.Join(dir, "old.pcap")); string(data) != "keep" {
		t.Fatalf("old.pcap written over: %q", data)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Fatalf("files made outside the room: %v", ents)
	}
	// A good name: made 0640 whatever the umask, in the room.
	old := syscall.Umask(0o077)
	f, err := r.Create("new.pcap", 0o640)
	syscall.Umask(old)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if fi, err := os.Lstat(filepath.Join(dir, "new.pcap")); err != nil || fi.Mode() != 0o640 {
		t.Fatalf("new.pcap: %v %v, want -rw-r-----", fi.Mode(), err)
	}
	if f.Name() != filepath.Join(dir, "new.pcap") {
		t.Fatalf("file name %q", f.Name())
	}
	// The room's directory swapped for a link after it was opened: the
	// descriptor still names the room, so files still land in it.
	os.Rename(dir, dir+".moved")
	os.Symlink(outside, dir)
	f2, err := r.Create("after.pcap", 0o640)
	if err != nil {
		t.Fatal(err)
	}
	f2.Close()
	if _, err := os.Lstat(filepath.Join(dir+".moved", "after.pcap")); err != nil {
		t.Fatalf("after.pcap not in the room: %v", err)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Fatalf("files made outside the room: %v", ents)
	}
	// And opening the room again through the link is refused.
	_, err = trust.OpenRoom(dir, trust.RoomOptions{Chain: me(), GID: -1})
	wantUnsafe(t, "a room that is a link", err, dir+" is a symbolic link")
}

func TestRoomSetgid(t *testing.T) {
	requireRoot(t)
	d := base(t)
	dir := filepath.Join(d, "captures")
	r, err := trust.OpenRoom(dir, trust.RoomOptions{Chain: me(), GID: 4242})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	f, err := r.Create("x.pcap", 0o640)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var st syscall.Stat_t
	syscall.Stat(dir, &st)
	if st.Gid != 4242 || st.Mode&0o7777 != 0o2750 {
		t.Fatalf("room %04o gid %d, want 2750 gid 4242", st.Mode&0o7777, st.Gid)
	}
	syscall.Stat(f.Name(), &st)
	if st.Gid != 4242 || st.Mode&0o7777 != 0o640 {
		t.Fatalf("file %04o gid %d, want 0640 gid 4242 (the room's)", st.Mode&0o7777, st.Gid)
	}
}

// TestPeerGroups: SO_PEERGROUPS gives the peer's groups (here our own,
// over a socketpair), zero bytes in the gids included.
func TestPeerGroups(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	c, err := trust.PeerCred(fds[0])
	if err != nil {
		t.Fatal(err)
	}
	want, _ := os.Getgroups()
	if c.UID != os.Geteuid() || c.GID != os.Getegid() || c.PID != os.Getpid() || c.GroupsFrom != "SO_PEERGROUPS" {
		t.Fatalf("cred %+v", c)
	}
	slices.Sort(want)
	got := slices.Clone(c.Groups)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("groups %v, want %v", got, want)
	}
}

// FuzzValidName: an accepted name is one component that is neither "."
// nor "..", has no NUL, and is bounded.
func FuzzValidName(f *testing.F) {
	for _, s := range []string{"a.pcap", "../x", "/etc/x", ".", "..", "a\x00b", "a/b", "x:y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if trust.ValidName(name) != nil {
			return
		}
		if filepath.Base(name) != name || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") || len(name) > trust.MaxNameLen || strings.HasPrefix(name, ".") {
			t.Fatalf("accepted %q", name)
		}
	})
}
