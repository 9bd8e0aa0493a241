package lab

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"regexp"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"github.com/warpflow/warpflow/internal/nic"
)

// Fixed, locally administered MAC addresses of the four veths (the same in
// every lab: each lab's links live in its own namespaces).
var (
	GenMAC  = net.HardwareAddr{0x02, 0x77, 0x66, 0x00, 0x00, 0x01} // gen0
	DP0MAC  = net.HardwareAddr{0x02, 0x77, 0x66, 0x00, 0x00, 0x02} // dp0
	DP1MAC  = net.HardwareAddr{0x02, 0x77, 0x66, 0x00, 0x00, 0x03} // dp1
	SinkMAC = net.HardwareAddr{0x02, 0x77, 0x66, 0x00, 0x00, 0x04} // sink0
)

// Addresses (RFC 2544 benchmark range).
var (
	GenAddr  = netip.MustParsePrefix("198.18.0.1/24")
	DP0Addr  = netip.MustParsePrefix("198.18.0.2/24")
	DP1Addr  = netip.MustParsePrefix("198.19.0.2/24")
	SinkAddr = netip.MustParsePrefix("198.19.0.1/24")
)

// Interface names, the same in every lab.
const (
	GenIface  = "gen0"
	DP0Iface  = "dp0"
	DP1Iface  = "dp1"
	SinkIface = "sink0"
)

// Errors.
var (
	ErrExists = errors.New("lab already exists")
	ErrNoLab  = errors.New("no such lab")
)

// NAPIMode chooses the NAPI setup of the dataplane's interfaces.
type NAPIMode int

const (
	NAPIDefault  NAPIMode = iota // kernel default: softirq on the core that raised it (the sender's, on veth)
	NAPIThreaded                 // /sys/class/net/IF/threaded = 1 on dp0 and dp1: kernel threads napi/dpN-ID
)

func (m NAPIMode) String() string {
	switch m {
	case NAPIDefault:
		return "default"
	case NAPIThreaded:
		return "threaded"
	}
	return fmt.Sprintf("NAPIMode(%d)", int(m))
}

// ParseNAPIMode parses "default" or "threaded".
func ParseNAPIMode(s string) (NAPIMode, error) {
	switch s {
	case "default", "":
		return NAPIDefault, nil
	case "threaded":
		return NAPIThreaded, nil
	}
	return 0, fmt.Errorf("napi mode %q: want default or threaded", s)
}

// Options configure Up.
type Options struct {
	// Prefix names the lab: namespaces <Prefix>-gen, <Prefix>-dp and
	// <Prefix>-sink. 1 to 10 characters, lower-case letters, digits and
	// '_', starting with a letter.
	Prefix string
	// Queues is the number of rx and tx queues of every veth (1 to 64).
	Queues int
	// NAPI sets up the NAPI of dp0 and dp1.
	NAPI NAPIMode
	// Force removes an existing lab of the same prefix first, instead of
	// refusing with ErrExists.
	Force bool
}

// DefaultPrefix is the prefix of the lab that warpctl and the README use.
const DefaultPrefix = "wf"

// DefaultOptions returns prefix "wf", one queue, default NAPI.
func DefaultOptions() Options {
	return Options{Prefix: DefaultPrefix, Queues: 1}
}

var prefixRE = regexp.MustCompile(`^[a-z][a-z0-9_]{0,9}$`)

// ValidatePrefix checks a lab prefix.
func ValidatePrefix(p string) error {
	if !prefixRE.MatchString(p) {
		return fmt.Errorf("lab prefix %q: want 1 to 10 of [a-z0-9_], starting with a letter", p)
	}
	return nil
}

func (o Options) validate() error {
	if err := ValidatePrefix(o.Prefix); err != nil {
		return err
	}
	if o.Queues < 1 || o.Queues > 64 {
		return fmt.Errorf("lab queues %d: want 1 to 64", o.Queues)
	}
	if o.NAPI != NAPIDefault && o.NAPI != NAPIThreaded {
		return fmt.Errorf("lab napi mode %d: unknown", int(o.NAPI))
	}
	return nil
}

// Endpoint is one veth of the lab.
type Endpoint struct {
	Namespace string           `json:"namespace"`
	Name      string           `json:"name"`
	Ifindex   int              `json:"ifindex"` // inside Namespace
	MAC       net.HardwareAddr `json:"-"`
	Addr      netip.Prefix     `json:"addr"`
}

// MarshalJSON writes MAC in colon form.
func (e Endpoint) MarshalJSON() ([]byte, error) {
	type plain Endpoint
	return json.Marshal(struct {
		plain
		MAC string `json:"mac"`
	}{plain(e), e.MAC.String()})
}

// Topology is a lab: its namespaces and its four veths.
type Topology struct {
	Prefix string   `json:"prefix"`
	Queues int      `json:"queues"`
	NAPI   string   `json:"napi"`
	Gen    Endpoint `json:"gen"`  // gen0 in <prefix>-gen, peer of DP0
	DP0    Endpoint `json:"dp0"`  // dp0 in <prefix>-dp: the dataplane's input
	DP1    Endpoint `json:"dp1"`  // dp1 in <prefix>-dp: the dataplane's output
	Sink   Endpoint `json:"sink"` // sink0 in <prefix>-sink, peer of DP1
}

// GenNS, DPNS and SinkNS name a lab's namespaces.
func GenNS(prefix string) string  { return prefix + "-gen" }
func DPNS(prefix string) string   { return prefix + "-dp" }
func SinkNS(prefix string) string { return prefix + "-sink" }

// Namespaces returns the lab's three namespace names.
func Namespaces(prefix string) []string {
	return []string{GenNS(prefix), DPNS(prefix), SinkNS(prefix)}
}

func expected(prefix string) Topology {
	return Topology{
		Prefix: prefix,
		Gen:    Endpoint{Namespace: GenNS(prefix), Name: GenIface, MAC: GenMAC, Addr: GenAddr},
		DP0:    Endpoint{Namespace: DPNS(prefix), Name: DP0Iface, MAC: DP0MAC, Addr: DP0Addr},
		DP1:    Endpoint{Namespace: DPNS(prefix), Name: DP1Iface, MAC: DP1MAC, Addr: DP1Addr},
		Sink:   Endpoint{Namespace: SinkNS(prefix), Name: SinkIface, MAC: SinkMAC, Addr: SinkAddr},
	}
}

// Up builds a lab. It refuses with ErrExists when any of the lab's
// namespaces exists, unless o.Force; on failure it removes what it made.
func Up(o Options) (*Topology, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	names := Namespaces(o.Prefix)
	for _, n := range names {
		if namespaceExists(n) {
			if !o.Force {
				return nil, fmt.Errorf("%w: namespace %s exists (warpctl lab down --prefix %s, or up --force)", ErrExists, n, o.Prefix)
			}
			if err := Down(o.Prefix); err != nil && !errors.Is(err, ErrNoLab) {
				return nil, fmt.Errorf("remove existing lab: %w", err)
			}
			break
		}
	}
	handles, err := createNamespaces(names)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, h := range handles {
			h.Close()
		}
	}()
	t, err := build(o, handles)
	if err != nil {
		_ = Down(o.Prefix)
		return nil, err
	}
	return t, nil
}

func build(o Options, hs []netns.NsHandle) (*Topology, error) {
	t := expected(o.Prefix)
	t.Queues = o.Queues
	t.NAPI = o.NAPI.String()
	ends := []*Endpoint{&t.Gen, &t.DP0, &t.DP1, &t.Sink}

	// IPv6 off in every namespace before any veth exists, so none ever
	// gets a link-local address or sends neighbour discovery.
	for _, n := range Namespaces(o.Prefix) {
		for _, k := range []string{"all", "default"} {
			if err := writeSysctl(n, "net/ipv6/conf/"+k+"/disable_ipv6", "1"); err != nil {
				return nil, err
			}
		}
	}

	handle := map[string]*netlink.Handle{}
	for i, n := range Namespaces(o.Prefix) {
		h, err := netlink.NewHandleAt(hs[i])
		if err != nil {
			return nil, fmt.Errorf("netlink in %s: %w", n, err)
		}
		defer h.Close()
		handle[n] = h
	}

	fds := map[string]netlink.NsFd{}
	for i, n := range Namespaces(o.Prefix) {
		fds[n] = netlink.NsFd(hs[i])
	}
	nsFD := func(ns string) netlink.NsFd { return fds[ns] }
	for _, pair := range [][2]*Endpoint{{&t.Gen, &t.DP0}, {&t.DP1, &t.Sink}} {
		a, b := pair[0], pair[1]
		la := netlink.NewLinkAttrs()
		la.Name = a.Name
		la.HardwareAddr = a.MAC
		la.NumTxQueues, la.NumRxQueues = o.Queues, o.Queues
		la.Namespace = nsFD(a.Namespace)
		v := netlink.NewVeth(la)
		v.PeerName = b.Name
		v.PeerHardwareAddr = b.MAC
		v.PeerNamespace = nsFD(b.Namespace)
		if err := handle[a.Namespace].LinkAdd(v); err != nil {
			return nil, fmt.Errorf("add veth %s/%s <-> %s/%s: %w", a.Namespace, a.Name, b.Namespace, b.Name, err)
		}
	}

	for _, e := range ends {
		h := handle[e.Namespace]
		l, err := h.LinkByName(e.Name)
		if err != nil {
			return nil, fmt.Errorf("find %s in %s: %w", e.Name, e.Namespace, err)
		}
		e.Ifindex = l.Attrs().Index
		if err := writeSysctl(e.Namespace, "net/ipv6/conf/"+e.Name+"/disable_ipv6", "1"); err != nil {
			return nil, err
		}
		if err := setOffloads(e.Namespace, e.Name, false, nic.TXChecksum, nic.TSO, nic.GSO, nic.GRO); err != nil {
			return nil, err
		}
		if err := h.LinkSetARPOff(l); err != nil {
			return nil, fmt.Errorf("arp off on %s: %w", e.Name, err)
		}
		if err := h.LinkSetMulticastOff(l); err != nil {
			return nil, fmt.Errorf("multicast off on %s: %w", e.Name, err)
		}
		addr := &netlink.Addr{IPNet: ipNet(e.Addr)}
		if err := h.AddrAdd(l, addr); err != nil {
			return nil, fmt.Errorf("address %s on %s: %w", e.Addr, e.Name, err)
		}
	}
	for _, n := range Namespaces(o.Prefix) {
		h := handle[n]
		lo, err := h.LinkByName("lo")
		if err != nil {
			return nil, fmt.Errorf("find lo in %s: %w", n, err)
		}
		if err := h.LinkSetUp(lo); err != nil {
			return nil, fmt.Errorf("lo up in %s: %w", n, err)
		}
	}
	for _, e := range ends {
		h := handle[e.Namespace]
		if err := h.LinkSetUp(&netlink.Device{LinkAttrs: netlink.LinkAttrs{Index: e.Ifindex, Name: e.Name}}); err != nil {
			return nil, fmt.Errorf("%s up: %w", e.Name, err)
		}
	}

	// Static neighbours: each end knows the MAC of the address across its
	// wire, so with ARP off nothing is ever resolved.
	for _, nb := range [][2]*Endpoint{{&t.Gen, &t.DP0}, {&t.DP0, &t.Gen}, {&t.DP1, &t.Sink}, {&t.Sink, &t.DP1}} {
		on, of := nb[0], nb[1]
		err := handle[on.Namespace].NeighAdd(&netlink.Neigh{
			LinkIndex:    on.Ifindex,
			Family:       netlink.FAMILY_V4,
			State:        netlink.NUD_PERMANENT,
			IP:           net.IP(of.Addr.Addr().AsSlice()),
			HardwareAddr: of.MAC,
		})
		if err != nil {
			return nil, fmt.Errorf("neighbour %s on %s: %w", of.Addr.Addr(), on.Name, err)
		}
	}
	// Routes across the dataplane.
	for _, r := range []struct {
		on  *Endpoint
		dst netip.Prefix
		via netip.Addr
	}{
		{&t.Gen, t.Sink.Addr.Masked(), t.DP0.Addr.Addr()},
		{&t.Sink, t.Gen.Addr.Masked(), t.DP1.Addr.Addr()},
	} {
		err := handle[r.on.Namespace].RouteAdd(&netlink.Route{
			LinkIndex: r.on.Ifindex,
			Dst:       ipNet(r.dst),
			Gw:        net.IP(r.via.AsSlice()),
		})
		if err != nil {
			return nil, fmt.Errorf("route %s via %s in %s: %w", r.dst, r.via, r.on.Namespace, err)
		}
	}

	for _, e := range []*Endpoint{&t.Gen, &t.Sink} {
		if err := AttachPass(e.Namespace, e.Name); err != nil {
			return nil, err
		}
	}
	if o.NAPI == NAPIThreaded {
		for _, e := range []*Endpoint{&t.DP0, &t.DP1} {
			if err := setThreaded(e.Namespace, e.Name, true); err != nil {
				return nil, err
			}
		}
	}
	return &t, nil
}

func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// Down removes the lab of prefix: its four veths and its three namespaces,
// nothing else. It returns an error wrapping ErrNoLab when none of them
// existed.
func Down(prefix string) error {
	if err := ValidatePrefix(prefix); err != nil {
		return err
	}
	found := false
	var errs []error
	for _, n := range Namespaces(prefix) {
		if !namespaceExists(n) {
			continue
		}
		found = true
		// Delete our veths first: the namespace itself may outlive its name
		// if a process is still inside, and the veths would live on with it.
		err := Do(n, func() error {
			for _, name := range []string{GenIface, DP0Iface, DP1Iface, SinkIface} {
				l, err := netlink.LinkByName(name)
				if err != nil {
					continue // not here, or already gone with its peer
				}
				if _, ok := l.(*netlink.Veth); !ok {
					continue // not one of ours
				}
				if err := netlink.LinkDel(l); err != nil {
					return fmt.Errorf("delete %s in %s: %w", name, n, err)
				}
			}
			return nil
		})
		if err != nil {
			errs = append(errs, err)
		}
		if err := netns.DeleteNamed(n); err != nil {
			errs = append(errs, fmt.Errorf("delete namespace %s: %w", n, err))
		}
	}
	if !found {
		return fmt.Errorf("%w: %s (no namespace %s, %s or %s)", ErrNoLab, prefix, GenNS(prefix), DPNS(prefix), SinkNS(prefix))
	}
	return errors.Join(errs...)
}
