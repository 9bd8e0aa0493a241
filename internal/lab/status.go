package lab

import (
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
)

// State says what exists of one lab (what Status returns).
type State struct {
	Prefix     string            `json:"prefix"`
	Complete   bool              `json:"complete"` // all three namespaces and all four veths exist
	Namespaces []NamespaceStatus `json:"namespaces"`
}

// NamespaceStatus is one of the lab's namespaces.
type NamespaceStatus struct {
	Name   string       `json:"name"`
	Exists bool         `json:"exists"`
	Links  []LinkStatus `json:"links,omitempty"` // the lab's veths found in it
}

// LinkStatus is one veth as the kernel reports it.
type LinkStatus struct {
	Name      string   `json:"name"`
	Ifindex   int      `json:"ifindex"`
	MAC       string   `json:"mac"`
	Up        bool     `json:"up"`
	Addrs     []string `json:"addrs"`
	Queues    int      `json:"queues"`
	XDP       *XDPInfo `json:"xdp,omitempty"` // nil: no program attached
	Threaded  string   `json:"napi_threaded"` // /sys/class/net/IF/threaded; "?" when unreadable
	RXPackets uint64   `json:"rx_packets"`
	TXPackets uint64   `json:"tx_packets"`
	RXDropped uint64   `json:"rx_dropped"`
	TXDropped uint64   `json:"tx_dropped"`
}

// XDPInfo is the XDP program attached to a link.
type XDPInfo struct {
	ID   uint32 `json:"id"`
	Name string `json:"name,omitempty"`
	Mode string `json:"mode"` // native, generic, offload
}

// Status inspects the lab of prefix. A missing lab is not an error: every
// namespace reports Exists false.
func Status(prefix string) (State, error) {
	if err := ValidatePrefix(prefix); err != nil {
		return State{}, err
	}
	st := State{Prefix: prefix, Complete: true}
	want := map[string][]string{
		GenNS(prefix):  {GenIface},
		DPNS(prefix):   {DP0Iface, DP1Iface},
		SinkNS(prefix): {SinkIface},
	}
	for _, n := range Namespaces(prefix) {
		ns := NamespaceStatus{Name: n, Exists: namespaceExists(n)}
		if !ns.Exists {
			st.Complete = false
			st.Namespaces = append(st.Namespaces, ns)
			continue
		}
		err := Do(n, func() error {
			for _, name := range want[n] {
				l, err := netlink.LinkByName(name)
				if err != nil {
					st.Complete = false
					continue
				}
				ns.Links = append(ns.Links, linkStatus(l))
			}
			return nil
		})
		if err != nil {
			return st, err
		}
		if len(ns.Links) > 0 {
			names := make([]string, len(ns.Links))
			for i, l := range ns.Links {
				names[i] = l.Name
			}
			vals, err := threaded(n, names...)
			for i := range ns.Links {
				ns.Links[i].Threaded = "?"
				if err == nil {
					ns.Links[i].Threaded = vals[i]
				}
			}
		}
		st.Namespaces = append(st.Namespaces, ns)
	}
	return st, nil
}

func linkStatus(l netlink.Link) LinkStatus {
	a := l.Attrs()
	ls := LinkStatus{
		Name:    a.Name,
		Ifindex: a.Index,
		MAC:     a.HardwareAddr.String(),
		Up:      a.Flags&net.FlagUp != 0,
		Queues:  a.NumRxQueues,
	}
	if s := a.Statistics; s != nil {
		ls.RXPackets, ls.TXPackets = s.RxPackets, s.TxPackets
		ls.RXDropped, ls.TXDropped = s.RxDropped, s.TxDropped
	}
	if addrs, err := netlink.AddrList(l, netlink.FAMILY_ALL); err == nil {
		for _, ad := range addrs {
			ls.Addrs = append(ls.Addrs, ad.IPNet.String())
		}
	}
	if x := a.Xdp; x != nil && x.Attached {
		info := &XDPInfo{ID: x.ProgId, Mode: xdpMode(x.AttachMode)}
		if p, err := ebpf.NewProgramFromID(ebpf.ProgramID(x.ProgId)); err == nil {
			if pi, err := p.Info(); err == nil {
				info.Name = pi.Name
			}
			p.Close()
		}
		ls.XDP = info
	}
	return ls
}

// xdpMode names an IFLA_XDP_ATTACHED value.
func xdpMode(m uint32) string {
	switch m {
	case 1:
		return "native"
	case 2:
		return "generic"
	case 3:
		return "offload"
	case 4:
		return "multi"
	}
	return fmt.Sprintf("mode%d", m)
}

// Exists reports whether any part of the lab exists.
func (s State) Exists() bool {
	for _, n := range s.Namespaces {
		if n.Exists {
			return true
		}
	}
	return false
}

// Link finds a link by name.
func (s State) Link(name string) (LinkStatus, bool) {
	for _, n := range s.Namespaces {
		for _, l := range n.Links {
			if l.Name == name {
				return l, true
			}
		}
	}
	return LinkStatus{}, false
}

// WriteText prints the status for people.
func (s State) WriteText(w io.Writer) {
	switch {
	case !s.Exists():
		fmt.Fprintf(w, "lab %s: not up (no namespace %s)\n", s.Prefix, strings.Join(Namespaces(s.Prefix), ", "))
		return
	case s.Complete:
		fmt.Fprintf(w, "lab %s: up\n", s.Prefix)
	default:
		fmt.Fprintf(w, "lab %s: incomplete (warpctl lab down --prefix %s, then up)\n", s.Prefix, s.Prefix)
	}
	for _, n := range s.Namespaces {
		if !n.Exists {
			fmt.Fprintf(w, "  namespace %s: missing\n", n.Name)
			continue
		}
		fmt.Fprintf(w, "  namespace %s\n", n.Name)
		for _, l := range n.Links {
			state := "down"
			if l.Up {
				state = "up"
			}
			xdp := "none"
			if l.XDP != nil {
				xdp = fmt.Sprintf("%s id %d (%s)", l.XDP.Name, l.XDP.ID, l.XDP.Mode)
			}
			fmt.Fprintf(w, "    %-6s ifindex %d %s %s %s queues %d threaded %s xdp %s\n",
				l.Name, l.Ifindex, l.MAC, state, strings.Join(l.Addrs, ","), l.Queues, l.Threaded, xdp)
			fmt.Fprintf(w, "           rx %d tx %d packets, rx_dropped %d tx_dropped %d\n",
				l.RXPackets, l.TXPackets, l.RXDropped, l.TXDropped)
			if fix := s.leftover(l); fix != "" {
				fmt.Fprintf(w, "           %s\n", fix)
			}
		}
	}
}

// Find returns the topology of an existing, complete lab.
func Find(prefix string) (*Topology, error) {
	st, err := Status(prefix)
	if err != nil {
		return nil, err
	}
	if !st.Exists() {
		return nil, fmt.Errorf("%w: %s (warpctl lab up --prefix %s)", ErrNoLab, prefix, prefix)
	}
	if !st.Complete {
		return nil, fmt.Errorf("lab %s is incomplete (warpctl lab down --prefix %s, then up)", prefix, prefix)
	}
	t := expected(prefix)
	for _, e := range []*Endpoint{&t.Gen, &t.DP0, &t.DP1, &t.Sink} {
		l, _ := st.Link(e.Name)
		e.Ifindex = l.Ifindex
		t.Queues = l.Queues
	}
	t.NAPI = NAPIDefault.String()
	if l, _ := st.Link(DP0Iface); l.Threaded == "1" {
		t.NAPI = NAPIThreaded.String()
	}
	return &t, nil
}

// leftover says, for dp0 or dp1 holding one of the lab's own programs
// (xdp-pass, which stays until removed), that a dataplane cannot attach
// there and the command that removes it; "" otherwise.
func (s State) leftover(l LinkStatus) string {
	if l.XDP == nil || (l.Name != DP0Iface && l.Name != DP1Iface) || (l.XDP.Name != PassProgramName && l.XDP.Name != DropProgramName) {
		return ""
	}
	return fmt.Sprintf("the lab's %s is on %s: warpflowd cannot attach there until %s", l.XDP.Name, l.Name, RemoveCommand(s.Prefix, l.Name))
}

// RemoveCommand is the warpctl command that removes the lab's XDP_PASS or
// XDP_DROP program from iface (xdp-pass --remove), for the lab prefix.
func RemoveCommand(prefix, iface string) string {
	if prefix == DefaultPrefix {
		return "warpctl lab xdp-pass --remove " + iface
	}
	return fmt.Sprintf("warpctl lab xdp-pass --prefix %s --remove %s", prefix, iface)
}
