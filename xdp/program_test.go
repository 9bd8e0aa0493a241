package xdp

import (
	"errors"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// testRunCtx is struct xdp_md, the context BPF_PROG_TEST_RUN takes for XDP.
type testRunCtx struct {
	Data, DataEnd, DataMeta, IngressIfindex, RXQueueIndex, EgressIfindex uint32
}

const (
	xdpPass     = 2
	xdpRedirect = 4
)

// TestProgramTestRun runs the redirect program on raw frames with
// BPF_PROG_TEST_RUN (no socket involved): every queue without a socket
// passes, and the per-queue counters say so exactly, with queues beyond
// the program's range counted in the overflow slot.
func TestProgramTestRun(t *testing.T) {
	requireRoot(t)
	inNewNetns(t)
	v := newVeth(t, "wfrun0", "wfrun1", 4)
	idx := v.ifindex
	// /sys shows the host's namespace, not this one: netlink answers.
	if n, err := RXQueues(v.name); err != nil || n != 4 {
		t.Errorf("RXQueues(%s) = %d, %v; want 4", v.name, n, err)
	}
	if _, err := RXQueues("wf-missing"); !errors.Is(err, unix.ENODEV) {
		t.Errorf("RXQueues of a missing interface = %v, want ENODEV", err)
	}
	p, err := LoadProgram(ProgramOptions{Interface: v.name, Attach: AttachAuto, Queues: 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	if p.Attached() != AttachNative {
		t.Errorf("attached %v on veth, want native", p.Attached())
	}
	frame := testFrame([6]byte{2, 0, 0, 0, 0, 1}, [6]byte{2, 0, 0, 0, 0, 2}, 7)
	runs := map[uint32]uint32{0: 5, 2: 3, 3: 4} // queue -> frames; queue 3 is beyond Queues
	for q, n := range runs {
		for i := uint32(0); i < n; i++ {
			ctx := testRunCtx{DataEnd: uint32(len(frame)), IngressIfindex: uint32(idx), RXQueueIndex: q}
			ret, err := p.objs.XskRedirect.Run(&ebpf.RunOptions{Data: frame, Context: ctx})
			if err != nil {
				t.Fatalf("test run queue %d: %v", q, err)
			}
			if ret != xdpPass {
				t.Fatalf("queue %d with no socket: action %d, want XDP_PASS (%d)", q, ret, xdpPass)
			}
		}
	}
	for q := 0; q <= p.Queues(); q++ {
		c, err := p.Counters(q)
		if err != nil {
			t.Fatal(err)
		}
		want := uint64(runs[uint32(q)])
		if q == p.Queues() {
			want = uint64(runs[3])
		}
		if c != (QueueCounters{Packets: want, NoSocket: want}) {
			t.Errorf("queue %d counters %+v, want %d packets, all no_socket", q, c, want)
		}
	}
	if _, err := p.Counters(p.Queues() + 1); err == nil {
		t.Error("Counters beyond the overflow slot succeeded")
	}
	if err := p.Unregister(1); err != nil {
		t.Errorf("Unregister of an empty queue: %v", err)
	}
	if err := p.Unregister(3); err == nil || !strings.Contains(err.Error(), "out of range") {
		t.Errorf("Unregister(3) on 3 queues = %v, want out of range", err)
	}
}

// TestProgramRefusesBusyInterface: an interface that already has an XDP
// program, ours (bpf_link) or another daemon's (attached by netlink), is
// refused with ErrBusy and its name, and left as it was.
func TestProgramRefusesBusyInterface(t *testing.T) {
	requireRoot(t)
	inNewNetns(t)
	newVeth(t, "wfbusy0", "wfbusy1", 1) // wfbusy1 has a bpf_link XDP program
	p, err := LoadProgram(ProgramOptions{Interface: "wfbusy0"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = LoadProgram(ProgramOptions{Interface: "wfbusy0"})
	if !errors.Is(err, ErrBusy) || !strings.Contains(err.Error(), "wfbusy0") {
		t.Errorf("second LoadProgram = %v, want ErrBusy naming wfbusy0", err)
	}
	_, err = LoadProgram(ProgramOptions{Interface: "wfbusy1"})
	if !errors.Is(err, ErrBusy) || !strings.Contains(err.Error(), "wfbusy1") {
		t.Errorf("LoadProgram over another bpf_link = %v, want ErrBusy naming wfbusy1", err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err == nil {
		t.Error("second Close succeeded")
	}
	// Another daemon's program, attached the old way (netlink, no link).
	l, _ := netlink.LinkByName("wfbusy0")
	pass := passProgram(t)
	if err := netlink.LinkSetXdpFdWithFlags(l, pass.FD(), 2 /* XDP_FLAGS_SKB_MODE */); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { netlink.LinkSetXdpFdWithFlags(l, -1, 2) })
	for _, m := range []AttachMode{AttachAuto, AttachNative, AttachGeneric} {
		_, err = LoadProgram(ProgramOptions{Interface: "wfbusy0", Attach: m})
		if !errors.Is(err, ErrBusy) || !strings.Contains(err.Error(), "wfbusy0") || !strings.Contains(err.Error(), "ip link set dev wfbusy0 xdpgeneric off") {
			t.Errorf("LoadProgram %v over another program = %v, want ErrBusy naming wfbusy0 and the fix", m, err)
		}
	}
	l, _ = netlink.LinkByName("wfbusy0")
	if x := l.Attrs().Xdp; x == nil || !x.Attached || x.ProgId == 0 {
		t.Errorf("the other program was disturbed: %+v", x)
	}
}

// TestAttachModes: loopback has no native XDP, so auto falls back to
// generic and forced native fails with ErrNotSupported; veth grants
// native, and generic when forced.
func TestAttachModes(t *testing.T) {
	requireRoot(t)
	inNewNetns(t)
	v := newVeth(t, "wfmode0", "wfmode1", 1)
	for _, tc := range []struct {
		iface string
		ask   AttachMode
		want  AttachMode
	}{
		{"lo", AttachAuto, AttachGeneric},
		{"lo", AttachGeneric, AttachGeneric},
		{v.name, AttachAuto, AttachNative},
		{v.name, AttachNative, AttachNative},
		{v.name, AttachGeneric, AttachGeneric},
	} {
		p, err := LoadProgram(ProgramOptions{Interface: tc.iface, Attach: tc.ask})
		if err != nil {
			t.Errorf("%s %v: %v", tc.iface, tc.ask, err)
			continue
		}
		if p.Attached() != tc.want {
			t.Errorf("%s %v: attached %v, want %v", tc.iface, tc.ask, p.Attached(), tc.want)
		}
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	}
	_, err := LoadProgram(ProgramOptions{Interface: "lo", Attach: AttachNative})
	if !errors.Is(err, ErrNotSupported) {
		t.Errorf("native on lo = %v, want ErrNotSupported", err)
	}
	l, _ := netlink.LinkByName("lo")
	if x := l.Attrs().Xdp; x != nil && x.Attached {
		t.Errorf("lo still has an XDP program after Close: %+v", x)
	}
}

func TestProgramOptionsErrors(t *testing.T) {
	for _, tc := range []struct {
		o    ProgramOptions
		want string
	}{
		{ProgramOptions{}, "no interface"},
		{ProgramOptions{Interface: "x", Attach: 9}, "attach mode 9"},
		{ProgramOptions{Interface: "x", Queues: -1}, "queues -1"},
		{ProgramOptions{Interface: "wf-no-such-if"}, "not found"},
	} {
		if _, err := LoadProgram(tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("LoadProgram(%+v) = %v, want %q", tc.o, err, tc.want)
		}
	}
}

func TestProbe(t *testing.T) {
	requireRoot(t)
	if err := Probe(); err != nil {
		t.Fatalf("Probe on a kernel with AF_XDP: %v", err)
	}
	// In the namespace /sys was mounted in, /sys answers.
	if n, err := RXQueues("lo"); err != nil || n != 1 {
		t.Errorf("RXQueues(lo) = %d, %v; want 1", n, err)
	}
	if err := MemlockWarning(); err != nil {
		t.Logf("memlock rlimit (a warning on this kernel): %v", err)
	}
}

// TestProgramRedirectsByQueue: with a socket registered on queue 1 only,
// BPF_PROG_TEST_RUN of frames on queue 1 returns XDP_REDIRECT and of
// frames on queue 0 XDP_PASS, counted per queue; after Unregister, or
// after the socket closes, queue 1 passes too.
func TestProgramRedirectsByQueue(t *testing.T) {
	requireRoot(t)
	inNewNetns(t)
	v := newVeth(t, "wfq0", "wfq1", 2)
	u := newTestUMEM(t, 64)
	s := newTestSocket(t, u, smallOptions(v.name, 1))
	p := newTestProgram(t, v.name)
	if p.Queues() != 2 {
		t.Fatalf("program steers %d queues on a 2-queue veth", p.Queues())
	}
	if err := p.Register(0, s); err == nil {
		t.Error("registered a queue-1 socket for queue 0")
	}
	if err := p.Register(1, s); err != nil {
		t.Fatal(err)
	}
	frame := testFrame(v.mac, v.peerMAC, 1)
	run := func(q uint32) uint32 {
		ctx := testRunCtx{DataEnd: uint32(len(frame)), IngressIfindex: uint32(v.ifindex), RXQueueIndex: q}
		ret, err := p.objs.XskRedirect.Run(&ebpf.RunOptions{Data: frame, Context: ctx})
		if err != nil {
			t.Fatalf("test run queue %d: %v", q, err)
		}
		return ret
	}
	if got := run(1); got != xdpRedirect {
		t.Errorf("queue 1 with a socket: action %d, want XDP_REDIRECT", got)
	}
	if got := run(0); got != xdpPass {
		t.Errorf("queue 0 without a socket: action %d, want XDP_PASS", got)
	}
	if err := p.Unregister(1); err != nil {
		t.Fatal(err)
	}
	if got := run(1); got != xdpPass {
		t.Errorf("queue 1 after Unregister: action %d, want XDP_PASS", got)
	}
	// Closing a registered socket takes it out of the map (the kernel does).
	if err := p.Register(1, s); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got := run(1); got != xdpPass {
		t.Errorf("queue 1 after its socket closed: action %d, want XDP_PASS", got)
	}
	c0, _ := p.Counters(0)
	c1, _ := p.Counters(1)
	if c0 != (QueueCounters{Packets: 1, NoSocket: 1}) || c1 != (QueueCounters{Packets: 3, Redirected: 1, NoSocket: 2}) {
		t.Errorf("counters queue 0 %+v, queue 1 %+v", c0, c1)
	}
}
