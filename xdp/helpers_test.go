package xdp

import (
	"encoding/binary"
	"errors"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// requireRoot skips a privileged test when not root, and fails it under
// CI=true, where every test must run.
func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("needs root (netns, veth, XDP, AF_XDP) and CI=true: a skip is a failure")
	}
	t.Skip("needs root: creates a network namespace, veth pairs, XDP programs and AF_XDP sockets")
}

// inNewNetns locks the test goroutine to its thread and moves the thread
// into a fresh, anonymous network namespace (no name to collide with other
// tests on the machine), restored at cleanup. Everything that creates a
// socket or a link must run on the test goroutine. Cleanups registered
// after this run first, still inside the namespace.
func inNewNetns(t testing.TB) {
	t.Helper()
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatalf("get netns: %v", err)
	}
	ns, err := netns.New() // also switches this thread to it
	if err != nil {
		orig.Close()
		runtime.UnlockOSThread()
		t.Fatalf("new netns: %v", err)
	}
	t.Cleanup(func() {
		ns.Close()
		if err := netns.Set(orig); err != nil {
			// Leave the thread locked: the runtime ends it with the goroutine.
			t.Errorf("restore netns: %v", err)
			return
		}
		orig.Close()
		runtime.UnlockOSThread()
	})
	// IPv6 off by default for links made from now on: no neighbour
	// discovery or router solicitations to skew exact counts.
	for _, k := range []string{"all", "default"} {
		if err := os.WriteFile("/proc/sys/net/ipv6/conf/"+k+"/disable_ipv6", []byte("1"), 0); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("disable ipv6: %v", err)
		}
	}
}

type vethPair struct {
	name, peer       string
	ifindex, peerIdx int
	mac, peerMAC     [6]byte
}

// newVeth creates a veth pair in the current (test) namespace, both ends
// up, with an XDP_PASS program on the peer so that frames transmitted
// into name are received at peer instead of vanishing.
func newVeth(t *testing.T, name, peer string, queues int) vethPair {
	t.Helper()
	la := netlink.NewLinkAttrs()
	la.Name = name
	la.NumTxQueues, la.NumRxQueues = queues, queues
	v := &netlink.Veth{LinkAttrs: la, PeerName: peer, PeerNumTxQueues: uint32(queues), PeerNumRxQueues: uint32(queues)}
	if err := netlink.LinkAdd(v); err != nil {
		t.Fatalf("add veth %s/%s: %v", name, peer, err)
	}
	t.Cleanup(func() {
		if l, err := netlink.LinkByName(name); err == nil {
			netlink.LinkDel(l)
		}
	})
	var p vethPair
	p.name, p.peer = name, peer
	for i, n := range []string{name, peer} {
		l, err := netlink.LinkByName(n)
		if err != nil {
			t.Fatalf("veth %s: %v", n, err)
		}
		if err := netlink.LinkSetUp(l); err != nil {
			t.Fatalf("set %s up: %v", n, err)
		}
		if i == 0 {
			p.ifindex = l.Attrs().Index
			copy(p.mac[:], l.Attrs().HardwareAddr)
		} else {
			p.peerIdx = l.Attrs().Index
			copy(p.peerMAC[:], l.Attrs().HardwareAddr)
		}
	}
	attachPass(t, p.peerIdx)
	return p
}

// attachPass attaches a two-instruction XDP_PASS program to ifindex
// through a bpf_link, closed at cleanup.
func attachPass(t *testing.T, ifindex int) {
	t.Helper()
	prog := passProgram(t)
	l, err := link.AttachXDP(link.XDPOptions{Program: prog, Interface: ifindex, Flags: link.XDPDriverMode})
	if err != nil {
		t.Fatalf("attach XDP_PASS to ifindex %d: %v", ifindex, err)
	}
	t.Cleanup(func() { l.Close() })
}

func passProgram(t *testing.T) *ebpf.Program {
	t.Helper()
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:         ebpf.XDP,
		License:      "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 2 /* XDP_PASS */), asm.Return()},
	})
	if err != nil {
		t.Fatalf("load XDP_PASS program: %v", err)
	}
	t.Cleanup(func() { prog.Close() })
	return prog
}

// testEtherType is IEEE 802 local experimental ethertype 1: nothing else
// on the test links uses it.
const testEtherType = 0x88b5

// testFrame is a 64-byte Ethernet frame to dst from src carrying seq.
func testFrame(dst, src [6]byte, seq uint32) []byte {
	f := make([]byte, 64)
	copy(f[0:6], dst[:])
	copy(f[6:12], src[:])
	binary.BigEndian.PutUint16(f[12:14], testEtherType)
	binary.BigEndian.PutUint32(f[14:18], seq)
	for i := 18; i < len(f); i++ {
		f[i] = byte(seq) ^ byte(i)
	}
	return f
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// packetSocket is an AF_PACKET socket bound to one interface that sees
// only received frames of testEtherType (a protocol-specific packet
// socket does not see outgoing frames).
type packetSocket struct {
	fd, ifindex int
}

func newPacketSocket(t *testing.T, ifindex int) *packetSocket {
	t.Helper()
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(testEtherType)))
	if err != nil {
		t.Fatalf("packet socket: %v", err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(testEtherType), Ifindex: ifindex}); err != nil {
		t.Fatalf("bind packet socket: %v", err)
	}
	tv := unix.NsecToTimeval(int64(20 * time.Millisecond))
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		t.Fatalf("packet socket timeout: %v", err)
	}
	return &packetSocket{fd: fd, ifindex: ifindex}
}

func (p *packetSocket) send(t *testing.T, frame []byte) {
	t.Helper()
	sa := &unix.SockaddrLinklayer{Protocol: htons(testEtherType), Ifindex: p.ifindex, Halen: 6}
	copy(sa.Addr[:], frame[0:6])
	if err := unix.Sendto(p.fd, frame, 0, sa); err != nil {
		t.Fatalf("send on ifindex %d: %v", p.ifindex, err)
	}
}

// recvAll collects received frames until want have arrived or the
// deadline passes, then keeps listening for extra for settle.
func (p *packetSocket) recvAll(t *testing.T, want int, deadline, settle time.Duration) [][]byte {
	t.Helper()
	var got [][]byte
	buf := make([]byte, 2048)
	end := time.Now().Add(deadline)
	for {
		if len(got) >= want && settle >= 0 {
			end = time.Now().Add(settle)
			settle = -1
		}
		if time.Now().After(end) {
			return got
		}
		n, _, err := unix.Recvfrom(p.fd, buf, 0)
		if err != nil {
			if err == unix.EAGAIN || err == unix.EINTR {
				continue
			}
			t.Fatalf("recv on ifindex %d: %v", p.ifindex, err)
		}
		got = append(got, append([]byte(nil), buf[:n]...))
	}
}

// openFDs counts this process's open file descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatalf("read /proc/self/fd: %v", err)
	}
	return len(ents)
}
