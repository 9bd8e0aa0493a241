package nic

import (
	"encoding/hex"
	"errors"
	"net"
	"testing"
	"unsafe"
)

// The structs are linux/ethtool.h's and linux/if.h's, byte for byte.
func TestStructSizes(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want uintptr
	}{
		{"struct ifreq", unsafe.Sizeof(ifreq{}), 40},
		{"struct ethtool_channels", unsafe.Sizeof(ethtoolChannels{}), 36},
		{"struct ethtool_ringparam", unsafe.Sizeof(ethtoolRingparam{}), 36},
		{"struct ethtool_rxfh", unsafe.Sizeof(ethtoolRXFH{}), 24},
	} {
		if c.got != c.want {
			t.Errorf("%s: %d bytes, the kernel's is %d", c.name, c.got, c.want)
		}
	}
}

func TestSymmetricKey(t *testing.T) {
	sym := make([]byte, 40)
	for i := range sym {
		sym[i] = []byte{0x6d, 0x5a}[i%2]
	}
	msft, _ := hex.DecodeString("6d5a56da255b0ec24167253d43a38fb0d0ca2bcbae7b30b477cb2da38030f20c6a42b73bbeac01fa")
	for _, c := range []struct {
		key  []byte
		want bool
	}{{sym, true}, {msft, false}, {nil, false}, {[]byte{1, 2}, false}} {
		if got := (RSS{Key: c.key}).SymmetricKey(); got != c.want {
			t.Errorf("key %x: symmetric %v, want %v", c.key, got, c.want)
		}
	}
}

func TestParseAttrs(t *testing.T) {
	// ifindex (u32), xdp-features (u64, 12-byte attr), then 2 bytes of junk.
	b := []byte{8, 0, 1, 0, 1, 0, 0, 0, 12, 0, 3, 0, 3, 0, 0, 0, 0, 0, 0, 0, 9, 9}
	a := parseAttrs(b)
	if len(a) != 2 || a[0].typ != 1 || len(a[0].value) != 4 || a[1].typ != 3 || len(a[1].value) != 8 {
		t.Fatalf("%+v", a)
	}
	if got := parseAttrs([]byte{200, 0, 1, 0}); len(got) != 0 {
		t.Fatalf("an attribute longer than the message parsed: %+v", got)
	}
}

// TestLoopback: lo answers "not supported" for what it has not, and the
// kernel's XDP features of lo are none.
func TestLoopback(t *testing.T) {
	for name, err := range map[string]error{
		"channels": func() error { _, err := GetChannels("lo"); return err }(),
		"rings":    func() error { _, err := GetRings("lo"); return err }(),
		"rss":      func() error { _, err := GetRSS("lo"); return err }(),
	} {
		if !errors.Is(err, ErrNotSupported) {
			t.Errorf("lo %s: %v, want ErrNotSupported", name, err)
		}
	}
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	f, err := GetXDPFeatures(lo.Index)
	if errors.Is(err, ErrNotSupported) {
		t.Logf("no netdev netlink family: %v", err)
		return
	}
	if err != nil || f != (XDPFeatures{}) {
		t.Errorf("lo's XDP features: %+v %v, want none", f, err)
	}
	if _, err := GetChannels("nosuchif0"); err == nil || errors.Is(err, ErrNotSupported) {
		t.Errorf("a missing interface: %v", err)
	}
	if _, err := GetChannels("a-name-longer-than-ifnamsiz"); err == nil {
		t.Error("an overlong name was accepted")
	}
}

// FuzzParseAttrs: any bytes the kernel (or anything posing as it) sends
// split without a panic, and every attribute lies within the input.
func FuzzParseAttrs(f *testing.F) {
	f.Add([]byte{8, 0, 1, 0, 1, 0, 0, 0, 12, 0, 3, 0, 3, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{4, 0, 0, 0})
	f.Add([]byte{0xff, 0xff, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		total := 0
		for _, a := range parseAttrs(b) {
			total += 4 + len(a.value)
		}
		if total > len(b) {
			t.Fatalf("attributes of %d bytes from %d", total, len(b))
		}
	})
}
