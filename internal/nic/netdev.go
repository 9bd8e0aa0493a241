package nic

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// The kernel's netdev generic netlink family (linux/netdev.h, Linux >=
// 6.3): what each device's driver can do with XDP and AF_XDP.
const (
	netdevFamily        = "netdev"
	netdevCmdDevGet     = 1
	netdevADevIfindex   = 1
	netdevADevXDPFeat   = 3
	netdevADevXDPZCSegs = 4
	netdevFamilyVersion = 1
	xdpActBasic         = 1 << 0
	xdpActRedirect      = 1 << 1
	xdpActNdoXmit       = 1 << 2
	xdpActXSKZeroCopy   = 1 << 3
	xdpActHWOffload     = 1 << 4
	xdpActRXSG          = 1 << 5
	xdpActNdoXmitSG     = 1 << 6
)

// XDPFeatures are the XDP capabilities a driver advertises.
type XDPFeatures struct {
	Basic, Redirect, NdoXmit, XSKZeroCopy, HWOffload, RXSG, NdoXmitSG bool
	// ZCMaxSegs is how many buffers one zero-copy AF_XDP frame may span
	// (1: no zero-copy multi-buffer).
	ZCMaxSegs uint32
}

// Native reports whether the driver runs XDP programs itself (native
// mode) and redirects to AF_XDP sockets: what the daemon's attach
// "native" needs.
func (f XDPFeatures) Native() bool { return f.Basic && f.Redirect }

// GetXDPFeatures asks the kernel what ifindex's driver advertises. A
// kernel without the netdev family (before 6.3) gives an error wrapping
// ErrNotSupported.
func GetXDPFeatures(ifindex int) (XDPFeatures, error) {
	fam, err := netlink.GenlFamilyGet(netdevFamily)
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EINVAL) {
			return XDPFeatures{}, fmt.Errorf("netdev netlink family (Linux >= 6.3): %w", ErrNotSupported)
		}
		return XDPFeatures{}, fmt.Errorf("netdev netlink family: %w", err)
	}
	req := nl.NewNetlinkRequest(int(fam.ID), unix.NLM_F_REQUEST)
	// The generic netlink header written out here: nl.Genlmsg is two
	// bytes but its Serialize returns four, the last two read from
	// whatever follows it in memory, which the kernel then refuses
	// (EINVAL) as a non-zero reserved field.
	req.AddRawData(append([]byte{netdevCmdDevGet, netdevFamilyVersion, 0, 0}, nl.NewRtAttr(netdevADevIfindex, nl.Uint32Attr(uint32(ifindex))).Serialize()...))
	msgs, err := req.Execute(unix.NETLINK_GENERIC, 0)
	if err != nil {
		return XDPFeatures{}, fmt.Errorf("netdev dev-get ifindex %d: %w", ifindex, err)
	}
	if len(msgs) != 1 || len(msgs[0]) < nl.SizeofGenlmsg {
		return XDPFeatures{}, fmt.Errorf("netdev dev-get ifindex %d: %d replies", ifindex, len(msgs))
	}
	var f XDPFeatures
	seen := false
	for _, a := range parseAttrs(msgs[0][nl.SizeofGenlmsg:]) {
		switch a.typ {
		case netdevADevXDPFeat:
			if len(a.value) < 8 {
				continue
			}
			v := binary.NativeEndian.Uint64(a.value)
			f.Basic, f.Redirect, f.NdoXmit = v&xdpActBasic != 0, v&xdpActRedirect != 0, v&xdpActNdoXmit != 0
			f.XSKZeroCopy, f.HWOffload = v&xdpActXSKZeroCopy != 0, v&xdpActHWOffload != 0
			f.RXSG, f.NdoXmitSG = v&xdpActRXSG != 0, v&xdpActNdoXmitSG != 0
			seen = true
		case netdevADevXDPZCSegs:
			if len(a.value) >= 4 {
				f.ZCMaxSegs = binary.NativeEndian.Uint32(a.value)
			}
		}
	}
	if !seen {
		return XDPFeatures{}, fmt.Errorf("netdev dev-get ifindex %d: no xdp-features attribute: %w", ifindex, ErrNotSupported)
	}
	return f, nil
}

type attr struct {
	typ   uint16
	value []byte
}

// parseAttrs splits netlink attributes (struct nlattr, 4-byte aligned),
// stopping at the first malformed one: nl.ParseRouteAttr reports an error
// for the padding after the last 64-bit attribute of this family.
func parseAttrs(b []byte) []attr {
	var out []attr
	for len(b) >= 4 {
		n := int(binary.NativeEndian.Uint16(b[0:]))
		if n < 4 || n > len(b) {
			break
		}
		out = append(out, attr{typ: binary.NativeEndian.Uint16(b[2:]) & 0x3fff, value: b[4:n]})
		n = (n + 3) &^ 3
		if n > len(b) {
			break
		}
		b = b[n:]
	}
	return out
}
