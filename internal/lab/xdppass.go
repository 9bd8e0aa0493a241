package lab

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
)

// Names the kernel shows (bpftool prog, Status) for the lab's trivial XDP
// programs: the XDP_PASS one Up attaches to the dataplane's peers, and an
// XDP_DROP one for measuring a generator alone.
const (
	PassProgramName = "wf_lab_pass"
	DropProgramName = "wf_lab_drop"
)

// ErrXDPBusy: the interface already has an XDP program.
var ErrXDPBusy = errors.New("interface already has an xdp program")

// loadTrivial loads a two-instruction XDP program that returns XDP_PASS,
// or XDP_DROP.
func loadTrivial(drop bool) (*ebpf.Program, error) {
	name, action := PassProgramName, int32(2) // XDP_PASS
	if drop {
		name, action = DropProgramName, 1 // XDP_DROP
	}
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:    name,
		Type:    ebpf.XDP,
		License: "GPL",
		Instructions: asm.Instructions{
			asm.Mov.Imm(asm.R0, action),
			asm.Return(),
		},
	})
	if err != nil {
		return nil, fmt.Errorf("load xdp program %s: %w", name, err)
	}
	return p, nil
}

// AttachPass attaches the XDP_PASS program to iface in namespace ns in
// native (driver) mode through the legacy netlink attach, so it stays after
// this process exits, until DetachXDP or until the link is deleted. An
// interface that already has a program is refused with ErrXDPBusy. On a veth
// this gives the interface a NAPI instance, so frames its peer transmits by
// XDP_TX, redirect or AF_XDP arrive instead of vanishing.
func AttachPass(ns, iface string) error { return attachTrivial(ns, iface, false) }

// AttachDrop is AttachPass with a program that drops every frame: the
// cheapest receiver, for measuring what a generator offers.
func AttachDrop(ns, iface string) error { return attachTrivial(ns, iface, true) }

func attachTrivial(ns, iface string, drop bool) error {
	p, err := loadTrivial(drop)
	if err != nil {
		return err
	}
	defer p.Close() // the attachment holds its own reference
	return Do(ns, func() error {
		l, err := netlink.LinkByName(iface)
		if err != nil {
			return fmt.Errorf("attach xdp: %s in %s: %w", iface, ns, err)
		}
		if x := l.Attrs().Xdp; x != nil && x.Attached {
			return fmt.Errorf("attach xdp: %s in %s: %w (program id %d)", iface, ns, ErrXDPBusy, x.ProgId)
		}
		err = netlink.LinkSetXdpFdWithFlags(l, p.FD(), nl.XDP_FLAGS_DRV_MODE|nl.XDP_FLAGS_UPDATE_IF_NOEXIST)
		if err != nil {
			return fmt.Errorf("attach xdp: %s in %s: %w", iface, ns, err)
		}
		return nil
	})
}

// DetachXDP removes a legacy (netlink-attached) native XDP program from
// iface in ns. A program attached through a bpf_link cannot be removed this
// way; the kernel refuses.
func DetachXDP(ns, iface string) error {
	return Do(ns, func() error {
		l, err := netlink.LinkByName(iface)
		if err != nil {
			return fmt.Errorf("detach xdp: %s in %s: %w", iface, ns, err)
		}
		if err := netlink.LinkSetXdpFdWithFlags(l, -1, nl.XDP_FLAGS_DRV_MODE); err != nil {
			return fmt.Errorf("detach xdp: %s in %s: %w", iface, ns, err)
		}
		return nil
	})
}
