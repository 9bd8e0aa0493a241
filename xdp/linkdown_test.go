package xdp

import (
	"errors"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// TestKickWhileLinkDown: a send kicked while the interface is down is
// refused with an error wrapping ErrLinkDown (and ENETDOWN), which says
// "a state, not a failure"; the socket's own error stays nil (a flap is
// not a deletion), and once the link is up again the kick succeeds. A
// deleted interface, by contrast, is the socket's Err (TestInterfaceDeleted)
// and its sends never wrap ErrLinkDown.
func TestKickWhileLinkDown(t *testing.T) {
	requireRoot(t)
	inNewNetns(t)
	v := newVeth(t, "wfkd0", "wfkd1", 1)
	u := newTestUMEM(t, 64)
	s := newTestSocket(t, u, smallOptions(v.name, 0))
	l, err := netlink.LinkByName(v.name)
	if err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkSetDown(l); err != nil {
		t.Fatal(err)
	}
	err = s.KickTX()
	if !errors.Is(err, ErrLinkDown) || !errors.Is(err, unix.ENETDOWN) {
		t.Fatalf("KickTX with %s down: %v, want ErrLinkDown wrapping ENETDOWN", v.name, err)
	}
	if err := s.Err(); err != nil {
		t.Errorf("Err with the link down: %v, want nil (down is not deleted)", err)
	}
	if err := netlink.LinkSetUp(l); err != nil {
		t.Fatal(err)
	}
	if err := s.KickTX(); err != nil {
		t.Errorf("KickTX with %s up again: %v", v.name, err)
	}
	if err := netlink.LinkDel(l); err != nil {
		t.Fatal(err)
	}
	if err := s.KickTX(); err == nil || errors.Is(err, ErrLinkDown) {
		t.Errorf("KickTX after %s was deleted: %v, want an error that is not ErrLinkDown", v.name, err)
	}
}
