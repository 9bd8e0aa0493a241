package doctor

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"github.com/warpflow/warpflow/internal/nic"
	"github.com/warpflow/warpflow/xdp"
	"golang.org/x/sys/unix"
)

// ours is the name of warpflowd's XDP program (xdp/xsk_redirect.c).
const ours = "xsk_redirect"

// iface is what the checks of one interface share.
type iface struct {
	name     string
	o        Options
	attrs    *netlink.LinkAttrs
	driver   string
	features *nic.XDPFeatures // nil: the kernel does not say
	featErr  error
	rxQueues int
	out      []Finding
}

func (c *iface) add(check string, l Level, msg, fix string) {
	c.out = append(c.out, Finding{Interface: c.name, Check: check, Level: l, Message: msg, Fix: fix})
}

// examine runs every check of one interface.
func examine(name string, o Options) []Finding {
	c := &iface{name: name, o: o}
	l, err := netlink.LinkByName(name)
	if err != nil {
		c.add("link", Fail, fmt.Sprintf("no interface %q in this network namespace (%v)", name, err), "check the name with `ip link`, or run warpctl doctor in the namespace that has it (`ip netns exec NS warpctl doctor IF`)")
		return c.out
	}
	c.attrs = l.Attrs()
	c.rxQueues = c.attrs.NumRxQueues
	if n, err := xdp.RXQueues(name); err == nil {
		c.rxQueues = n
	}
	c.link(l)
	c.driverInfo()
	c.xdpModes()
	c.zeroCopy()
	c.queues()
	c.rss()
	c.mtu()
	c.attached()
	c.napi()
	c.rings()
	return c.out
}

func (c *iface) link(l netlink.Link) {
	a := c.attrs
	msg := fmt.Sprintf("%s, ifindex %d, mtu %d, %d rx / %d tx queues, state %s", l.Type(), a.Index, a.MTU, c.rxQueues, a.NumTxQueues, a.OperState)
	if a.Flags&net.FlagUp == 0 {
		c.add("link", Warn, msg+": administratively down, so nothing arrives", "ip link set dev "+c.name+" up")
		return
	}
	c.add("link", OK, msg, "")
}

func (c *iface) driverInfo() {
	d, err := nic.DriverInfo(c.name)
	switch {
	case errors.Is(err, nic.ErrNotSupported):
		c.driver = c.attrs.Name
		if c.attrs.Flags&net.FlagLoopback != 0 {
			c.driver = "loopback"
		}
		c.add("driver", OK, "the driver reports no ethtool driver information ("+c.driver+")", "")
	case err != nil:
		c.add("driver", Warn, "ethtool driver information: "+err.Error(), "")
	default:
		c.driver = d.Name
		c.add("driver", OK, fmt.Sprintf("%s %s (firmware %q, bus %q)", d.Name, d.Version, d.Firmware, d.Bus), "")
	}
}

func (c *iface) xdpModes() {
	f, err := nic.GetXDPFeatures(c.attrs.Index)
	if err != nil {
		c.featErr = err
		c.add("xdp_modes", Warn, "the kernel does not say which XDP modes the driver has ("+err.Error()+"): generic (skb) mode works everywhere; attach: auto tries native first", "")
		return
	}
	c.features = &f
	var has []string
	for _, x := range []struct {
		on   bool
		name string
	}{{f.Basic, "basic"}, {f.Redirect, "redirect"}, {f.NdoXmit, "ndo-xmit"}, {f.XSKZeroCopy, "xsk-zerocopy"}, {f.HWOffload, "hw-offload"}, {f.RXSG, "rx-sg"}, {f.NdoXmitSG, "ndo-xmit-sg"}} {
		if x.on {
			has = append(has, x.name)
		}
	}
	adv := "none"
	if len(has) > 0 {
		adv = strings.Join(has, ", ")
	}
	if !f.Native() {
		c.add("xdp_modes", Warn, "no native XDP (the driver advertises "+adv+"): only generic (skb) mode, after the kernel has built an skb for every frame: slower, and copy-mode sockets only", "attach: generic for this interface, or a NIC whose driver runs XDP natively")
		return
	}
	msg := "native and generic XDP (the driver advertises " + adv + ")"
	if f.XSKZeroCopy {
		msg += fmt.Sprintf("; zero-copy frames of up to %d buffers", f.ZCMaxSegs)
	}
	c.add("xdp_modes", OK, msg, "")
}

// zeroCopy tries a zero-copy AF_XDP bind, and a copy-mode one if that is
// refused.
func (c *iface) zeroCopy() {
	q := c.o.Queue
	if !c.o.Try {
		c.add("zero_copy", OK, "not tried (binds off)", "")
		return
	}
	if q >= c.rxQueues {
		c.add("zero_copy", Fail, fmt.Sprintf("queue %d does not exist (%d rx queues)", q, c.rxQueues), fmt.Sprintf("pick a queue below %d", c.rxQueues))
		return
	}
	zc := bind(c.name, q, c.o.FrameSize, xdp.BindZeroCopy)
	switch {
	case zc == nil:
		c.add("zero_copy", OK, fmt.Sprintf("zero-copy AF_XDP bind granted on queue %d: frames move between the driver and the UMEM without a copy", q), "")
		return
	case errors.Is(zc, xdp.ErrBusy):
		c.add("zero_copy", Warn, fmt.Sprintf("queue %d is bound by another AF_XDP socket (a running warpflowd?): not tried (%v)", q, zc), "stop that process, or try another queue (--queue)")
		return
	case errors.Is(zc, unix.EPERM) || errors.Is(zc, unix.EACCES):
		c.add("zero_copy", Warn, "not tried: binding needs CAP_NET_RAW and CAP_NET_ADMIN ("+zc.Error()+")", "run as root or with "+strings.Join(Required, ", "))
		return
	case !errors.Is(zc, xdp.ErrNotSupported):
		c.add("zero_copy", Fail, fmt.Sprintf("zero-copy bind on queue %d failed: %v", q, zc), "")
		return
	}
	why := "the driver refused it (" + errnoOf(zc) + ")"
	switch {
	case c.driver == "veth":
		why = "veth has no AF_XDP zero-copy at all: the kernel refused the bind (" + errnoOf(zc) + ")"
	case c.features != nil && !c.features.Native():
		why = "zero-copy needs native XDP, which the driver lacks (" + errnoOf(zc) + ")"
	case c.features != nil && !c.features.XSKZeroCopy:
		why = "the driver does not advertise xsk-zerocopy, and the kernel refused the bind (" + errnoOf(zc) + ")"
	}
	cp := bind(c.name, q, c.o.FrameSize, xdp.BindCopy)
	if cp != nil {
		c.add("zero_copy", Fail, fmt.Sprintf("no zero-copy on queue %d (%s), and a copy-mode bind failed too: %v", q, why, cp), "")
		return
	}
	c.add("zero_copy", Warn, fmt.Sprintf("copy mode: no zero-copy on queue %d because %s; a copy-mode bind was granted, so the kernel copies every frame between its buffers and the UMEM", q, why),
		"accept copy mode (bind: copy or auto), or use a NIC whose driver has AF_XDP zero-copy")
}

func errnoOf(err error) string {
	var en unix.Errno
	if errors.As(err, &en) {
		return unix.ErrnoName(en) + ": " + en.Error()
	}
	return err.Error()
}

// bind opens a small UMEM and one AF_XDP socket on queue q in mode m, and
// closes both.
func bind(name string, q, frameSize int, m xdp.BindMode) error {
	u, err := xdp.NewUMEM(xdp.UMEMOptions{Frames: 256, FrameSize: frameSize})
	if err != nil {
		return err
	}
	defer u.Close()
	so := xdp.DefaultSocketOptions(name, q)
	so.RXSize, so.TXSize, so.FillSize, so.CompletionSize = 64, 64, 64, 64
	so.Bind = m
	s, err := xdp.NewSocket(u, so)
	if err != nil {
		return err
	}
	return s.Close()
}

func (c *iface) queues() {
	ch, err := nic.GetChannels(c.name)
	if errors.Is(err, nic.ErrNotSupported) {
		c.add("queues", OK, fmt.Sprintf("%d rx queue(s); the driver reports no channels (no ethtool -L)", c.rxQueues), "")
		return
	}
	if err != nil {
		c.add("queues", Warn, fmt.Sprintf("%d rx queue(s); channels: %v", c.rxQueues, err), "")
		return
	}
	msg := fmt.Sprintf("%d rx queue(s); channels: combined %d of %d, rx %d of %d, tx %d of %d", c.rxQueues, ch.Combined, ch.MaxCombined, ch.RX, ch.MaxRX, ch.TX, ch.MaxTX)
	switch {
	case ch.MaxCombined > ch.Combined:
		c.add("queues", Warn, msg+": the NIC can spread receive over more queues than are on", fmt.Sprintf("ethtool -L %s combined %d (and list the queues in the daemon config, or leave queues: [] for all)", c.name, ch.MaxCombined))
	case ch.MaxRX > ch.RX:
		c.add("queues", Warn, msg+": more rx channels are possible", fmt.Sprintf("ethtool -L %s rx %d", c.name, ch.MaxRX))
	default:
		c.add("queues", OK, msg, "")
	}
}

func (c *iface) rss() {
	multi := c.rxQueues > 1
	r, err := nic.GetRSS(c.name)
	if errors.Is(err, nic.ErrNotSupported) {
		if multi {
			c.add("rss", Warn, fmt.Sprintf("%d rx queues but no RSS hash key to set (the driver has none): which queue a flow lands on is the driver's choice, so both directions of a flow may reach different queues, which a stateful pipeline cannot have", c.rxQueues), "one queue for stateful pipelines, or a NIC with RSS")
			return
		}
		c.add("rss", OK, "one rx queue: no RSS needed (the driver has no RSS key)", "")
		return
	}
	if err != nil {
		c.add("rss", Warn, "RSS: "+err.Error(), "")
		return
	}
	msg := fmt.Sprintf("hash %s, %d-byte key, %d-entry indirection table", r.HashName(), len(r.Key), len(r.Indir))
	sym := r.SymmetricKey() || r.InputXfrm&1 != 0
	switch {
	case r.InputXfrm&1 != 0:
		msg += ", symmetric-xor input transform: both directions of a flow hash alike"
	case r.SymmetricKey():
		msg += ", symmetric key: both directions of a flow hash alike"
	case len(r.Key) > 0:
		msg += ", key not symmetric: the two directions of a flow may reach different queues"
	}
	settable := "a key was not tried (binds off)"
	canSet := false
	if c.o.Try && len(r.Key) > 0 {
		switch err := nic.SetRSSKey(c.name, r.Key, r.InputXfrm); {
		case err == nil:
			settable, canSet = "a key can be set (the current one was written back)", true
		case errors.Is(err, unix.EPERM):
			settable = "setting a key not tried: needs CAP_NET_ADMIN"
		default:
			settable = "the driver refuses a new key (" + errnoOf(err) + ")"
		}
	} else if len(r.Key) == 0 {
		settable = "the driver exposes no key"
	}
	msg += "; " + settable
	switch {
	case sym || !multi:
		c.add("rss", OK, msg, "")
	case canSet:
		c.add("rss", Warn, msg, fmt.Sprintf("ethtool -X %s hkey %s (a symmetric Toeplitz key), or ethtool -X %s hfunc toeplitz symmetric-xor (Linux >= 6.8)", c.name, symmetricKey(len(r.Key)), c.name))
	default:
		c.add("rss", Warn, msg+": stateful pipelines need both directions of a flow on one queue", "one queue for stateful pipelines, or a NIC whose RSS key can be set")
	}
}

// symmetricKey is the 0x6d5a key of n bytes in ethtool's hkey syntax.
func symmetricKey(n int) string {
	b := make([]string, n)
	for i := range b {
		b[i] = [2]string{"6d", "5a"}[i%2]
	}
	return strings.Join(b, ":")
}

func (c *iface) mtu() {
	room := c.o.FrameSize - unix.XDP_PACKET_HEADROOM - c.o.Headroom
	frame := c.attrs.MTU + 14 + 4 // Ethernet header and one VLAN tag
	msg := fmt.Sprintf("mtu %d: frames up to %d bytes with a VLAN tag; a %d-byte UMEM frame holds %d after the kernel's %d bytes of headroom and %d of ours",
		c.attrs.MTU, frame, c.o.FrameSize, room, unix.XDP_PACKET_HEADROOM, c.o.Headroom)
	if c.features != nil && c.features.RXSG {
		msg += "; the driver has XDP multi-buffer (rx-sg), which warpflowd does not use"
	}
	if frame > room {
		fix := fmt.Sprintf("ip link set dev %s mtu %d", c.name, room-18)
		if c.o.FrameSize == 2048 && frame <= 4096-unix.XDP_PACKET_HEADROOM-c.o.Headroom {
			fix = "umem.frame_size: 4096, or " + fix
		}
		c.add("mtu", Fail, msg+": a full-size packet does not fit one frame and warpflowd does not use AF_XDP multi-buffer, so the kernel would drop it", fix)
		return
	}
	c.add("mtu", OK, msg, "")
}

// attached reports the XDP program already on the interface, and who
// holds it.
func (c *iface) attached() {
	x := c.attrs.Xdp
	if x == nil || !x.Attached || x.ProgId == 0 {
		c.add("xdp_attached", OK, "no XDP program attached", "")
		return
	}
	mode := map[uint32]string{1: "native", 2: "generic", 3: "offloaded", 4: "several modes"}[x.AttachMode]
	if mode == "" {
		mode = fmt.Sprintf("mode %d", x.AttachMode)
	}
	name := "name unknown"
	if p, err := ebpf.NewProgramFromID(ebpf.ProgramID(x.ProgId)); err == nil {
		if info, err := p.Info(); err == nil {
			name = info.Name
		}
		p.Close()
	} else {
		name = "name unknown: " + err.Error()
	}
	linkID, linked := xdpLink(c.attrs.Index, x.ProgId)
	desc := fmt.Sprintf("program %q (id %d) attached in %s mode", name, x.ProgId, mode)
	dispatcher := name == "xdp_dispatcher" || dispatcherPinned(c.attrs.Index)
	switch {
	case dispatcher:
		c.add("xdp_attached", Fail, desc+": a libxdp dispatcher owns the hook; warpflowd attaches its own program through a bpf_link and cannot join a dispatcher", "xdp-loader unload "+c.name+" --all (or stop the program that loaded it)")
	case name == ours && linked:
		c.add("xdp_attached", Warn, fmt.Sprintf("%s through bpf_link %d: a warpflowd serves this interface now; another one would be refused", desc, linkID), "stop that warpflowd first to start another")
	case linked:
		c.add("xdp_attached", Fail, fmt.Sprintf("%s through bpf_link %d, which a running process holds: warpflowd cannot attach beside it", desc, linkID), "stop the process that holds bpf_link "+strconv.Itoa(int(linkID))+" (bpftool link show id "+strconv.Itoa(int(linkID))+" says which program)")
	default:
		off := map[uint32]string{1: "xdpdrv", 2: "xdpgeneric", 3: "xdpoffload"}[x.AttachMode]
		if off == "" {
			off = "xdp"
		}
		c.add("xdp_attached", Fail, desc+" without a bpf_link, so it stays after the process that attached it is gone (a leftover): warpflowd cannot attach beside it", "ip link set dev "+c.name+" "+off+" off")
	}
}

// xdpLink finds the bpf_link holding program prog on ifindex.
func xdpLink(ifindex int, prog uint32) (link.ID, bool) {
	var it link.Iterator
	defer it.Close()
	for it.Next() {
		info, err := it.Link.Info()
		if err != nil || info.Type != link.XDPType || uint32(info.Program) != prog {
			continue
		}
		if x := info.XDP(); x != nil && int(x.Ifindex) == ifindex {
			return info.ID, true
		}
	}
	return 0, false
}

// dispatcherPinned reports libxdp's pinned dispatcher state for ifindex
// (/sys/fs/bpf/xdp/dispatch-IFINDEX-PROGID).
func dispatcherPinned(ifindex int) bool {
	m, _ := filepath.Glob(fmt.Sprintf("/sys/fs/bpf/xdp/dispatch-%d-*", ifindex))
	return len(m) > 0
}

// sysfsHere reports whether /sys shows this namespace's interface.
func (c *iface) sysfsHere() bool {
	b, err := os.ReadFile(filepath.Join("/sys/class/net", c.name, "ifindex"))
	return err == nil && strings.TrimSpace(string(b)) == strconv.Itoa(c.attrs.Index)
}

func (c *iface) napi() {
	if !c.sysfsHere() {
		c.add("napi", Warn, "not read: /sys shows another network namespace's interfaces (sysfs shows the namespace that mounted it)", "run it as `ip netns exec NS warpctl doctor "+c.name+"`, which mounts sysfs for the namespace")
		return
	}
	read := func(f string) string {
		b, err := os.ReadFile(filepath.Join("/sys/class/net", c.name, f))
		if err != nil {
			return "n/a"
		}
		return strings.TrimSpace(string(b))
	}
	threaded, gro, deferIRQ := read("threaded"), read("gro_flush_timeout"), read("napi_defer_hard_irqs")
	mode := map[string]string{"0": "softirq", "1": "threaded", "2": "threaded busy-poll"}[threaded]
	if mode == "" {
		mode = "unknown (" + threaded + ")"
	}
	msg := fmt.Sprintf("NAPI %s; gro_flush_timeout %s ns, napi_defer_hard_irqs %s", mode, gro, deferIRQ)
	if gro == "0" && deferIRQ == "0" {
		msg += "; with busy_poll.prefer the daemon polls the queue itself only if the kernel defers its interrupts"
		c.add("napi", OK, msg, fmt.Sprintf("for busy_poll.prefer: echo 2 > /sys/class/net/%s/napi_defer_hard_irqs; echo 200000 > /sys/class/net/%s/gro_flush_timeout", c.name, c.name))
		return
	}
	c.add("napi", OK, msg, "")
}

func (c *iface) rings() {
	r, err := nic.GetRings(c.name)
	switch {
	case errors.Is(err, nic.ErrNotSupported):
		c.add("rings", OK, "the driver reports no ring sizes", "")
	case err != nil:
		c.add("rings", Warn, "ring sizes: "+err.Error(), "")
	case r.RX < r.RXMax && r.RX < 1024:
		c.add("rings", Warn, fmt.Sprintf("rx ring %d of %d, tx ring %d of %d: a short rx ring drops bursts before the daemon sees them", r.RX, r.RXMax, r.TX, r.TXMax), fmt.Sprintf("ethtool -G %s rx %d", c.name, min(r.RXMax, 4096)))
	default:
		c.add("rings", OK, fmt.Sprintf("rx ring %d of %d, tx ring %d of %d", r.RX, r.RXMax, r.TX, r.TXMax), "")
	}
}
