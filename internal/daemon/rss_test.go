package daemon

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/warpflow/warpflow/internal/control"
	"github.com/warpflow/warpflow/internal/lab"
	"github.com/warpflow/warpflow/internal/nic"
)

// toeplitz is the Toeplitz hash of data under key (the RSS hash).
func toeplitz(key, data []byte) uint32 {
	var h uint32
	k := binary.BigEndian.Uint32(key)
	bit := 32
	for _, b := range data {
		for i := 7; i >= 0; i-- {
			if b>>i&1 != 0 {
				h ^= k
			}
			k <<= 1
			if key[bit/8]>>(7-bit%8)&1 != 0 {
				k |= 1
			}
			bit++
		}
	}
	return h
}

// TestSymmetricKey: the key the daemon writes hashes a flow's two
// directions alike (IPv4 and IPv6 tuples, addresses then ports, as RSS
// reads them), and nic.RSS recognises it; a random-looking key does not.
func TestSymmetricKey(t *testing.T) {
	for _, n := range []int{40, 52} {
		key := symmetricKey(n)
		if !(nic.RSS{Key: key}).SymmetricKey() {
			t.Fatalf("%d-byte key %x not recognised as symmetric", n, key)
		}
		for i, c := range []struct{ src, dst []byte }{
			{[]byte{10, 0, 0, 1}, []byte{198, 51, 100, 7}},
			{[]byte{192, 0, 2, 1}, []byte{203, 0, 113, 200}},
			{make([]byte, 16), append(make([]byte, 15), 1)},
		} {
			fwd := append(append(append([]byte(nil), c.src...), c.dst...), 0x9c, 0x40, 0, 80)
			rev := append(append(append([]byte(nil), c.dst...), c.src...), 0, 80, 0x9c, 0x40)
			if a, b := toeplitz(key, fwd), toeplitz(key, rev); a != b {
				t.Fatalf("%d-byte key, tuple %d: %08x one way, %08x the other", n, i, a, b)
			}
		}
	}
	// The Microsoft default key (what many drivers use) is not.
	ms := []byte{0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0,
		0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30, 0xf2, 0x0c,
		0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa}
	fwd := []byte{10, 0, 0, 1, 198, 51, 100, 7, 0x9c, 0x40, 0, 80}
	rev := []byte{198, 51, 100, 7, 10, 0, 0, 1, 0, 80, 0x9c, 0x40}
	if toeplitz(ms, fwd) == toeplitz(ms, rev) || (nic.RSS{Key: ms}).SymmetricKey() {
		t.Fatal("the default key hashes both directions alike: the test cannot tell")
	}
	// The known answer for that key (Microsoft's RSS verification
	// suite: 66.9.149.187:2794 > 161.142.100.80:1766 hashes to
	// 0x51ccc178), so that toeplitz is the RSS hash.
	if h := toeplitz(ms, []byte{66, 9, 149, 187, 161, 142, 100, 80, 0x0a, 0xea, 0x06, 0xe6}); h != 0x51ccc178 {
		t.Fatalf("toeplitz %08x, want 51ccc178", h)
	}
}

// TestSymmetricRSSVeth: on a veth (no RSS) the outcome is
// "unsupported", with the reason, and nothing is changed.
func TestSymmetricRSSVeth(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("needs root (a namespace and a veth), and CI=true forbids skipping")
		}
		t.Skip("needs root: makes a namespace and a veth")
	}
	ns := "wfrss-" + strings.TrimPrefix(t.Name(), "Test")
	exec.Command("ip", "netns", "del", ns).Run()
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	if out, err := exec.Command("ip", "-n", ns, "link", "add", "rss0", "type", "veth", "peer", "name", "rss1").CombinedOutput(); err != nil {
		t.Fatalf("ip link add: %v %s", err, out)
	}
	var st control.RSSState
	if err := lab.Do(ns, func() error { st, _ = setSymmetricRSS("rss0"); return nil }); err != nil {
		t.Fatal(err)
	}
	if st.Result != rssUnsupported || !strings.Contains(st.Detail, "veth") {
		t.Fatalf("veth: %+v", st)
	}
}

// fakeRSSDriver is a driver's RSS state behind rssOps: what it holds, and
// how it misbehaves.
type fakeRSSDriver struct {
	rss     nic.RSS
	getErr  error
	setErr  error
	ignores bool // takes a write and keeps what it had
	writes  int
}

func (f *fakeRSSDriver) ops() rssOps {
	return rssOps{
		driver: func(string) (nic.Driver, error) { return nic.Driver{Name: "fakenic"}, nil },
		get: func(string) (nic.RSS, error) {
			r := f.rss
			r.Key = append([]byte(nil), f.rss.Key...)
			return r, f.getErr
		},
		set: func(_ string, key []byte, xfrm uint8) error {
			f.writes++
			if f.setErr != nil {
				return f.setErr
			}
			if !f.ignores {
				f.rss.Key, f.rss.InputXfrm = append([]byte(nil), key...), xfrm
			}
			return nil
		},
	}
}

// TestSetSymmetricRSSOutcomes: each driver answer gives its outcome. A
// Toeplitz driver gets the repeated key (its transform kept) and reads it
// back; a CRC32 driver gets the symmetric-XOR transform, its key kept
// (a repeated key proves nothing for it); a refusal, and a driver that
// takes the key but keeps its own, are failures that say so; a
// symmetric setup is left alone, unwritten.
func TestSetSymmetricRSSOutcomes(t *testing.T) {
	ms := []byte{0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0,
		0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30, 0xf2, 0x0c,
		0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa}
	for _, c := range []struct {
		name       string
		drv        fakeRSSDriver
		result     string
		detail     string // in the detail
		writes     int
		key        []byte // the key it holds after (nil: unchecked)
		xfrm       uint8
		restoreKey bool // the returned original is what it had
	}{
		{name: "toeplitz", drv: fakeRSSDriver{rss: nic.RSS{Key: ms, HashFunc: 1}}, result: rssSet, detail: "repeated", writes: 1, key: symmetricKey(len(ms)), restoreKey: true},
		{name: "toeplitz 52", drv: fakeRSSDriver{rss: nic.RSS{Key: append(ms, ms[:12]...), HashFunc: 1, InputXfrm: 2}}, result: rssSet, writes: 1, key: symmetricKey(52), xfrm: 2, restoreKey: true},
		{name: "crc32", drv: fakeRSSDriver{rss: nic.RSS{Key: ms, HashFunc: 4}}, result: rssSet, detail: "symmetric-xor", writes: 1, key: ms, xfrm: 1, restoreKey: true},
		{name: "already key", drv: fakeRSSDriver{rss: nic.RSS{Key: symmetricKey(40), HashFunc: 1}}, result: rssAlready, writes: 0},
		{name: "already xfrm", drv: fakeRSSDriver{rss: nic.RSS{Key: ms, HashFunc: 4, InputXfrm: 1}}, result: rssAlready, writes: 0},
		{name: "repeated key, crc32", drv: fakeRSSDriver{rss: nic.RSS{Key: symmetricKey(40), HashFunc: 4}}, result: rssSet, detail: "symmetric-xor", writes: 1, xfrm: 1},
		{name: "no rss", drv: fakeRSSDriver{getErr: nic.ErrNotSupported}, result: rssUnsupported, detail: "fakenic", writes: 0},
		{name: "no key", drv: fakeRSSDriver{rss: nic.RSS{HashFunc: 1}}, result: rssUnsupported, detail: "0 bytes", writes: 0},
		{name: "read fails", drv: fakeRSSDriver{getErr: errors.New("EIO")}, result: rssFailed, detail: "EIO", writes: 0},
		{name: "refused", drv: fakeRSSDriver{rss: nic.RSS{Key: ms, HashFunc: 1}, setErr: errors.New("EINVAL")}, result: rssFailed, detail: "ethtool -X", writes: 1, key: ms},
		{name: "ignored", drv: fakeRSSDriver{rss: nic.RSS{Key: ms, HashFunc: 1}, ignores: true}, result: rssFailed, detail: "reads back", writes: 1, key: ms},
	} {
		t.Run(c.name, func(t *testing.T) {
			drv := c.drv
			before := append([]byte(nil), drv.rss.Key...)
			st, was := drv.ops().setSymmetric("eth9")
			if st.Interface != "eth9" || st.Result != c.result || !strings.Contains(st.Detail, c.detail) {
				t.Fatalf("outcome %+v, want %s with %q", st, c.result, c.detail)
			}
			if drv.writes != c.writes {
				t.Fatalf("%d writes, want %d", drv.writes, c.writes)
			}
			if c.key != nil && (!bytes.Equal(drv.rss.Key, c.key) || drv.rss.InputXfrm != c.xfrm) {
				t.Fatalf("driver holds key %x xfrm %d, want %x xfrm %d", drv.rss.Key, drv.rss.InputXfrm, c.key, c.xfrm)
			}
			if c.restoreKey && !bytes.Equal(was.Key, before) {
				t.Fatalf("original %x, want %x (what Close writes back)", was.Key, before)
			}
		})
	}
}
