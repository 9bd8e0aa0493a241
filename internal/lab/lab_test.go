package lab

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/warpflow/warpflow/internal/testwait"
)

// RequireRoot skips a privileged test when not root, and fails it instead
// when CI=true (CI runs as root, so there a skip would hide a regression).
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN, CAP_BPF), and CI=true forbids skipping")
	}
	t.Skip("needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN, CAP_BPF)")
}

// testPrefix is unique per run: other tests build labs on this machine at
// the same time.
func testPrefix(t *testing.T) string {
	b := make([]byte, 2)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "wt" + hex.EncodeToString(b)
}

func up(t *testing.T, o Options) *Topology {
	t.Helper()
	topo, err := Up(o)
	if err != nil {
		t.Fatalf("Up: %v", err)
	}
	t.Cleanup(func() {
		if err := Down(o.Prefix); err != nil && !errors.Is(err, ErrNoLab) {
			t.Errorf("cleanup Down: %v", err)
		}
	})
	return topo
}

func TestOptionsValidate(t *testing.T) {
	for _, o := range []Options{
		{Prefix: "", Queues: 1},
		{Prefix: "Wf", Queues: 1},
		{Prefix: "toolongprefix", Queues: 1},
		{Prefix: "wf-x", Queues: 1},
		{Prefix: "wf", Queues: 0},
		{Prefix: "wf", Queues: 65},
		{Prefix: "wf", Queues: 1, NAPI: 7},
	} {
		if _, err := Up(o); err == nil {
			t.Errorf("Up(%+v): want a validation error", o)
		}
	}
	if err := DefaultOptions().validate(); err != nil {
		t.Errorf("DefaultOptions: %v", err)
	}
	if _, err := ParseNAPIMode("busy"); err == nil {
		t.Error("ParseNAPIMode(busy): want error")
	}
	if m, err := ParseNAPIMode("threaded"); err != nil || m != NAPIThreaded || m.String() != "threaded" {
		t.Errorf("ParseNAPIMode(threaded) = %v, %v", m, err)
	}
}

// checkOffloadsOff: the four offloads Up turns off read off (in-process,
// the same ioctl ethtool -k uses).
func checkOffloadsOff(t *testing.T, e Endpoint) {
	t.Helper()
	got, err := Offloads(e.Namespace, e.Name)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 {
		t.Errorf("%s: %d offloads read, want 4", e.Name, len(got))
	}
	for f, on := range got {
		if on {
			t.Errorf("%s: %s on, want off", e.Name, f)
		}
	}
}

// TestUpWithoutTools: the lab comes up, offloads off, with no ethtool (no
// tool at all) on PATH. It ran ethtool -K for them before; the CUDA
// machine has no ethtool and cannot install one.
func TestUpWithoutTools(t *testing.T) {
	requireRoot(t)
	t.Setenv("PATH", t.TempDir())
	if p, err := exec.LookPath("ethtool"); err == nil {
		t.Fatalf("ethtool still found at %s", p)
	}
	o := DefaultOptions()
	o.Prefix = testPrefix(t)
	o.Queues = 2
	topo := up(t, o)
	for _, e := range []Endpoint{topo.Gen, topo.DP0, topo.DP1, topo.Sink} {
		checkOffloadsOff(t, e)
	}
}

func TestUpStatusDown(t *testing.T) {
	requireRoot(t)
	o := DefaultOptions()
	o.Prefix = testPrefix(t)
	topo := up(t, o)

	for _, e := range []Endpoint{topo.Gen, topo.DP0, topo.DP1, topo.Sink} {
		if e.Ifindex <= 0 {
			t.Errorf("%s: ifindex %d", e.Name, e.Ifindex)
		}
	}

	// A second Up refuses; Force recreates.
	if _, err := Up(o); !errors.Is(err, ErrExists) {
		t.Fatalf("second Up: %v, want ErrExists", err)
	}
	o.Force = true
	topo = up(t, o)

	st, err := Status(o.Prefix)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Complete {
		t.Fatalf("status not complete: %+v", st)
	}
	for _, want := range []struct {
		e   Endpoint
		xdp bool
	}{{topo.Gen, true}, {topo.DP0, false}, {topo.DP1, false}, {topo.Sink, true}} {
		l, ok := st.Link(want.e.Name)
		if !ok {
			t.Fatalf("status lacks %s", want.e.Name)
		}
		if !l.Up || l.MAC != want.e.MAC.String() || l.Ifindex != want.e.Ifindex {
			t.Errorf("%s: %+v, want up, mac %s, ifindex %d", want.e.Name, l, want.e.MAC, want.e.Ifindex)
		}
		if len(l.Addrs) != 1 || l.Addrs[0] != want.e.Addr.String() {
			t.Errorf("%s: addrs %v, want only %s (no IPv6 link-local)", want.e.Name, l.Addrs, want.e.Addr)
		}
		if (l.XDP != nil) != want.xdp {
			t.Errorf("%s: xdp %+v, want attached=%v", want.e.Name, l.XDP, want.xdp)
		}
		if l.XDP != nil && (l.XDP.Name != PassProgramName || l.XDP.Mode != "native") {
			t.Errorf("%s: xdp %+v, want %s native", want.e.Name, l.XDP, PassProgramName)
		}
		if l.Threaded != "0" {
			t.Errorf("%s: threaded %q, want 0", want.e.Name, l.Threaded)
		}
		if v, err := readSysctl(want.e.Namespace, "net/ipv6/conf/"+want.e.Name+"/disable_ipv6"); err != nil || v != "1" {
			t.Errorf("%s: disable_ipv6 = %q, %v", want.e.Name, v, err)
		}
		checkOffloadsOff(t, want.e)
	}
	var text strings.Builder
	st.WriteText(&text)
	if !strings.Contains(text.String(), "lab "+o.Prefix+": up") || !strings.Contains(text.String(), PassProgramName) {
		t.Errorf("status text:\n%s", text.String())
	}

	// Static neighbours and routes.
	checkNeigh := func(e Endpoint, ip net.IP, mac net.HardwareAddr) {
		t.Helper()
		err := Do(e.Namespace, func() error {
			ns, err := netlink.NeighList(e.Ifindex, netlink.FAMILY_V4)
			if err != nil {
				return err
			}
			for _, n := range ns {
				if n.IP.Equal(ip) && n.HardwareAddr.String() == mac.String() && n.State == netlink.NUD_PERMANENT {
					return nil
				}
			}
			t.Errorf("%s: no permanent neighbour %s -> %s in %+v", e.Name, ip, mac, ns)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	checkNeigh(topo.Gen, net.IP(DP0Addr.Addr().AsSlice()), DP0MAC)
	checkNeigh(topo.DP0, net.IP(GenAddr.Addr().AsSlice()), GenMAC)
	checkNeigh(topo.DP1, net.IP(SinkAddr.Addr().AsSlice()), SinkMAC)
	checkNeigh(topo.Sink, net.IP(DP1Addr.Addr().AsSlice()), DP1MAC)
	err = Do(topo.Gen.Namespace, func() error {
		rs, err := netlink.RouteGet(net.IP(SinkAddr.Addr().AsSlice()))
		if err != nil {
			return err
		}
		if len(rs) != 1 || rs[0].Gw.String() != DP0Addr.Addr().String() || rs[0].LinkIndex != topo.Gen.Ifindex {
			t.Errorf("gen route to sink: %+v", rs)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// Quiet: no frame appears on any veth by itself.
	time.Sleep(1500 * time.Millisecond)
	st2, err := Status(o.Prefix)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range st2.Namespaces {
		for _, l := range n.Links {
			if l.RXPackets != 0 || l.TXPackets != 0 {
				t.Errorf("%s not quiet after up: rx %d tx %d packets", l.Name, l.RXPackets, l.TXPackets)
			}
		}
	}

	// Plumbing: gen exchanges 3 UDP datagrams with a socket on dp0's
	// address through the static neighbours (dp0 has no XDP: the kernel's
	// skb path), the replies come back into gen0 through its XDP_PASS
	// program; the same between sink and dp1.
	udpEcho(t, topo.DP0, topo.Gen, 3)
	udpEcho(t, topo.DP1, topo.Sink, 3)
	st3, err := Status(o.Prefix)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string][2]uint64{GenIface: {3, 3}, DP0Iface: {3, 3}, DP1Iface: {3, 3}, SinkIface: {3, 3}} {
		l, _ := st3.Link(name)
		if l.RXPackets != want[0] || l.TXPackets != want[1] {
			t.Errorf("%s after 3 udp round trips: rx %d tx %d packets, want exactly %d/%d (no ARP, no IPv6 noise)", name, l.RXPackets, l.TXPackets, want[0], want[1])
		}
	}

	// Start runs a tool inside a namespace.
	var out strings.Builder
	cmd := exec.Command("cat", "/proc/net/dev")
	cmd.Stdout = &out
	if err := Start(topo.Sink.Namespace, cmd); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	if err := testwait.Recv(t, exited, "cat /proc/net/dev in "+topo.Sink.Namespace+" to exit", testwait.Deadline); err != nil || !strings.Contains(out.String(), SinkIface+":") || strings.Contains(out.String(), GenIface+":") {
		t.Errorf("cat /proc/net/dev in %s: %v\n%s", topo.Sink.Namespace, err, out.String())
	}

	// A namespace that shares the prefix but is not the lab's survives.
	other := o.Prefix + "-other"
	hs, err := createNamespaces([]string{other})
	if err != nil {
		t.Fatal(err)
	}
	hs[0].Close()
	t.Cleanup(func() { netns.DeleteNamed(other) })

	if err := Down(o.Prefix); err != nil {
		t.Fatalf("Down: %v", err)
	}
	if !namespaceExists(other) {
		t.Errorf("Down removed %s, which is not the lab's", other)
	}
	for _, n := range Namespaces(o.Prefix) {
		if namespaceExists(n) {
			t.Errorf("namespace %s left after Down", n)
		}
	}
	st, err = Status(o.Prefix)
	if err != nil || st.Exists() {
		t.Errorf("status after Down: %+v, %v", st, err)
	}
	if err := Down(o.Prefix); !errors.Is(err, ErrNoLab) {
		t.Errorf("second Down: %v, want ErrNoLab", err)
	}
	if _, err := Find(o.Prefix); !errors.Is(err, ErrNoLab) {
		t.Errorf("Find after Down: %v, want ErrNoLab", err)
	}
}

func TestThreadedNAPI(t *testing.T) {
	requireRoot(t)
	o := DefaultOptions()
	o.Prefix = testPrefix(t)
	o.NAPI = NAPIThreaded
	o.Queues = 2
	topo := up(t, o)
	st, err := Status(o.Prefix)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{GenIface, DP0Iface, DP1Iface, SinkIface} {
		if l, _ := st.Link(name); l.Queues != 2 {
			t.Errorf("%s: %d queues, want 2", name, l.Queues)
		}
	}
	for name, want := range map[string]string{GenIface: "0", DP0Iface: "1", DP1Iface: "1", SinkIface: "0"} {
		if l, _ := st.Link(name); l.Threaded != want {
			t.Errorf("%s: threaded %q, want %s", name, l.Threaded, want)
		}
	}
	f, err := Find(o.Prefix)
	if err != nil || f.NAPI != "threaded" || f.Queues != 2 || f.DP0.Ifindex != topo.DP0.Ifindex {
		t.Errorf("Find: %+v, %v", f, err)
	}
	// Attaching XDP to dp0 creates its NAPI, which must come up threaded.
	if err := AttachPass(topo.DP0.Namespace, DP0Iface); err != nil {
		t.Fatal(err)
	}
	if err := AttachPass(topo.DP0.Namespace, DP0Iface); !errors.Is(err, ErrXDPBusy) {
		t.Errorf("second AttachPass: %v, want ErrXDPBusy", err)
	}
	if err := DetachXDP(topo.DP0.Namespace, DP0Iface); err != nil {
		t.Fatal(err)
	}
	st, _ = Status(o.Prefix)
	if l, _ := st.Link(DP0Iface); l.XDP != nil {
		t.Errorf("dp0 still has xdp after DetachXDP: %+v", l.XDP)
	}
}

// udpEcho sends n datagrams from client to a socket on server's address,
// each echoed back, and fails unless all n round trips complete.
func udpEcho(t *testing.T, server, client Endpoint, n int) {
	t.Helper()
	var srv, cli *net.UDPConn
	err := Do(server.Namespace, func() (err error) {
		srv, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.IP(server.Addr.Addr().AsSlice()), Port: 7})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	err = Do(client.Namespace, func() (err error) {
		cli, err = net.DialUDP("udp4", nil, srv.LocalAddr().(*net.UDPAddr))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	buf := make([]byte, 64)
	deadline := time.Now().Add(3 * time.Second)
	srv.SetDeadline(deadline)
	cli.SetDeadline(deadline)
	for i := range n {
		if _, err := cli.Write([]byte{byte(i)}); err != nil {
			t.Fatalf("%s -> %s: %v", client.Name, server.Name, err)
		}
		_, from, err := srv.ReadFromUDP(buf)
		if err != nil {
			t.Fatalf("%s -> %s: datagram %d: %v", client.Name, server.Name, i, err)
		}
		if _, err := srv.WriteToUDP(buf[:1], from); err != nil {
			t.Fatal(err)
		}
		if _, err := cli.Read(buf); err != nil {
			t.Fatalf("%s <- %s: reply %d: %v", client.Name, server.Name, i, err)
		}
	}
}
