package lab

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
)

// PassProgramName is the name the kernel shows (bpftool prog, Status) for the
// XDP_PASS program that Up attaches to the dataplane's peers.
const PassProgramName = "wf_lab_pass"

// ErrXDPBusy: the interface already has an XDP program.
var ErrXDPBusy = errors.New("interface already has an xdp program")

// loadPass loads a two-instruction XDP program that returns XDP_PASS.
func loadPass() (*ebpf.Program, error) {
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:    PassProgramName,
		Type:    ebpf.XDP,
		License: "GPL",
		Instructions: asm.Instructions{
			asm.Mov.Imm(asm.R0, 2), // XDP_PASS
			asm.Return(),
		},
	})
	if err != nil {
		return nil, fmt.Errorf("load xdp pass program: %w", err)
	}
	return p, nil
}

// AttachPass attaches the XDP_PASS program to iface in namespace ns in
// native (driver) mode through the legacy netlink attach, so it stays after
// this process exits, until DetachXDP or until the link is deleted. An
// interface that already has a program is refused with ErrXDPBusy. On a veth
// this gives the interface a NAPI instance, so frames its peer transmits by
// XDP_TX, redirect or AF_XDP arrive instead of vanishing.
func AttachPass(ns, iface string) error {
	p, err := loadPass()
	if err != nil {
		return err
	}
	defer p.Close() // the attachment holds its own reference
	return Do(ns, func() error {
		l, err := netlink.LinkByName(iface)
		if err != nil {
			return fmt.Errorf("attach xdp pass: %s in %s: %w", iface, ns, err)
		}
		if x := l.Attrs().Xdp; x != nil && x.Attached {
			return fmt.Errorf("attach xdp pass: %s in %s: %w (program id %d)", iface, ns, ErrXDPBusy, x.ProgId)
		}
		err = netlink.LinkSetXdpFdWithFlags(l, p.FD(), nl.XDP_FLAGS_DRV_MODE|nl.XDP_FLAGS_UPDATE_IF_NOEXIST)
		if err != nil {
			return fmt.Errorf("attach xdp pass: %s in %s: %w", iface, ns, err)
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
