package xdp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/warpflow/warpflow/internal/allocs"
	"github.com/warpflow/warpflow/rings"
)

const testFrameSize = 2048

func newTestUMEM(t *testing.T, frames int) *UMEM {
	t.Helper()
	u, err := NewUMEM(UMEMOptions{Frames: frames, FrameSize: testFrameSize})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := u.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			t.Errorf("close umem: %v", err)
		}
	})
	return u
}

func smallOptions(iface string, queue int) SocketOptions {
	o := DefaultSocketOptions(iface, queue)
	o.RXSize, o.TXSize, o.FillSize, o.CompletionSize = 128, 128, 128, 128
	return o
}

func newTestSocket(t *testing.T, u *UMEM, o SocketOptions) *Socket {
	t.Helper()
	s, err := NewSocket(u, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			t.Errorf("close socket: %v", err)
		}
	})
	return s
}

func newTestProgram(t *testing.T, iface string) *Program {
	t.Helper()
	p, err := LoadProgram(ProgramOptions{Interface: iface})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// fillFrames puts frames [first, first+n) on s's fill ring.
func fillFrames(t *testing.T, s *Socket, first, n int) {
	t.Helper()
	addrs := make([]uint64, n)
	for i := range addrs {
		addrs[i] = uint64((first + i) * testFrameSize)
	}
	if got := s.Fill().ProduceAddrs(addrs); got != n {
		t.Fatalf("fill ring took %d of %d frames", got, n)
	}
}

// receive collects descriptors from s's RX ring until want arrived or
// two seconds passed, then watches 100ms more for extras. Not a wait that
// fails: callers compare the count (one wants none to arrive).
func receive(t *testing.T, s *Socket, want int) []rings.Desc {
	t.Helper()
	var got []rings.Desc
	buf := make([]rings.Desc, 64)
	end := time.Now().Add(2 * time.Second)
	settled := false
	for time.Now().Before(end) {
		n := s.RX().Consume(buf)
		got = append(got, buf[:n]...)
		if n == 0 {
			if _, err := s.Poll(10 * time.Millisecond); err != nil {
				t.Fatal(err)
			}
		}
		if len(got) >= want && !settled {
			settled = true
			end = time.Now().Add(100 * time.Millisecond)
		}
	}
	return got
}

// transmit puts descs on s's TX ring and kicks until every address came
// back on the completion ring (or two seconds passed); it returns the
// completed addresses, which callers compare with what they sent.
func transmit(t *testing.T, s *Socket, descs []rings.Desc) []uint64 {
	t.Helper()
	if n := s.TX().Produce(descs); n != len(descs) {
		t.Fatalf("tx ring took %d of %d descriptors", n, len(descs))
	}
	var done []uint64
	buf := make([]uint64, 64)
	for end := time.Now().Add(2 * time.Second); len(done) < len(descs) && time.Now().Before(end); {
		if err := s.KickTX(); err != nil {
			t.Fatalf("kick tx: %v", err)
		}
		n := s.Completion().ConsumeAddrs(buf)
		done = append(done, buf[:n]...)
		if n == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	return done
}

func seqOf(frame []byte) uint32 { return binary.BigEndian.Uint32(frame[14:18]) }

// TestLiveRXTX: frames sent from the veth peer arrive on the RX ring,
// exactly once each, in the frames we filled, at the kernel's headroom;
// rewritten in place and put on the TX ring they reach the peer and their
// addresses come back on the completion ring. The program's counters and
// the socket's statistics agree.
func TestLiveRXTX(t *testing.T) {
	for _, m := range []AttachMode{AttachNative, AttachGeneric} {
		t.Run(m.String(), func(t *testing.T) { testLiveRXTX(t, m) })
	}
}

func testLiveRXTX(t *testing.T, mode AttachMode) {
	requireRoot(t)
	inNewNetns(t)
	v := newVeth(t, "wfrx0", "wfrx1", 1)
	u := newTestUMEM(t, 256)
	if mode == AttachGeneric { // and extra headroom
		var err error
		if u, err = NewUMEM(UMEMOptions{Frames: 256, FrameSize: testFrameSize, Headroom: 128}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { u.Close() })
	}
	s := newTestSocket(t, u, smallOptions(v.name, 0))
	if s.Bound() != BindCopy {
		t.Errorf("bound %v on veth, want copy (veth has no zero-copy)", s.Bound())
	}
	if s.Ifindex() != v.ifindex || s.Interface() != v.name || s.Queue() != 0 {
		t.Errorf("socket reports %s/%d queue %d", s.Interface(), s.Ifindex(), s.Queue())
	}
	p, err := LoadProgram(ProgramOptions{Interface: v.name, Attach: mode})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	if p.Attached() != mode {
		t.Errorf("attached %v on veth, asked for %v", p.Attached(), mode)
	}
	if err := p.Register(0, s); err != nil {
		t.Fatal(err)
	}
	fillFrames(t, s, 0, 128)

	const k = 100
	peer := newPacketSocket(t, v.peerIdx)
	for i := uint32(0); i < k; i++ {
		peer.send(t, testFrame(v.mac, v.peerMAC, i))
	}
	got := receive(t, s, k)
	if len(got) != k {
		t.Fatalf("received %d frames, sent %d", len(got), k)
	}
	mem := u.Mem()
	frames := map[uint64]bool{}
	for i, d := range got {
		base := d.Addr &^ u.FrameMask()
		if d.Addr-base != uint64(u.RXHeadroom()) || u.RXHeadroom() != unix.XDP_PACKET_HEADROOM+u.Options().Headroom {
			t.Errorf("frame %d at offset %d in its frame, want XDP_PACKET_HEADROOM + %d", i, d.Addr-base, u.Options().Headroom)
		}
		if base >= 128*testFrameSize || frames[base] {
			t.Errorf("frame %d in frame %#x: not one we filled, or used twice", i, base)
		}
		frames[base] = true
		if want := testFrame(v.mac, v.peerMAC, uint32(i)); !bytes.Equal(mem[d.Addr:d.Addr+uint64(d.Len)], want) {
			t.Errorf("frame %d (seq %d) bytes differ from what was sent", i, seqOf(mem[d.Addr:]))
		}
	}
	c, err := p.Counters(0)
	if err != nil {
		t.Fatal(err)
	}
	if c != (QueueCounters{Packets: k, Redirected: k}) {
		t.Errorf("program counters %+v, want %d packets, all redirected", c, k)
	}
	// (TXRingEmpty counts the kernel finding the TX ring empty when poll
	// woke it: not a receive figure.)
	if st, err := s.Stats(); err != nil || st.RXDropped+st.RXInvalidDescs+st.RXRingFull+st.RXFillRingEmpty+st.TXInvalidDescs != 0 {
		t.Errorf("socket stats %+v, %v; want no drops", st, err)
	}

	// Turn the frames around in place and send them back.
	for _, d := range got {
		f := mem[d.Addr : d.Addr+uint64(d.Len)]
		copy(f, testFrame(v.peerMAC, v.mac, seqOf(f)+1000))
	}
	if n := allocs.Count(20, func() { s.KickTX() }); n != 0 {
		t.Errorf("KickTX allocated %d times in 20 calls, want 0", n)
	}
	done := transmit(t, s, got)
	want := make([]uint64, 0, k)
	for _, d := range got {
		want = append(want, d.Addr)
	}
	slices.Sort(done)
	slices.Sort(want)
	if !slices.Equal(done, want) {
		t.Errorf("completion ring returned %d addresses, want the %d transmitted ones", len(done), len(want))
	}
	back := peer.recvAll(t, k, 2*time.Second, 100*time.Millisecond)
	if len(back) != k {
		t.Fatalf("peer received %d frames, transmitted %d", len(back), k)
	}
	for i, f := range back {
		if !bytes.Equal(f, testFrame(v.peerMAC, v.mac, uint32(i)+1000)) {
			t.Errorf("peer frame %d: seq %d, bytes differ from what was transmitted", i, seqOf(f))
		}
	}
	if st, err := s.Stats(); err != nil || st.TXInvalidDescs != 0 {
		t.Errorf("socket stats %+v, %v", st, err)
	}
}

// TestSharedUMEMForward: receive on veth A's socket, transmit the same
// frame addresses on veth B's socket, which shares A's UMEM with its own
// fill and completion rings: no byte is copied in userspace, the frames
// reach B's peer, and the completions come back on B's ring, not A's.
func TestSharedUMEMForward(t *testing.T) {
	requireRoot(t)
	inNewNetns(t)
	a := newVeth(t, "wffa0", "wffa1", 1)
	b := newVeth(t, "wffb0", "wffb1", 1)
	u := newTestUMEM(t, 256)
	sa := newTestSocket(t, u, smallOptions(a.name, 0))
	ob := smallOptions(b.name, 0)
	ob.SharedWith = sa
	sb := newTestSocket(t, nil, ob)
	if sb.UMEM() != u || sb.Fill() == sa.Fill() || sb.Completion() == sa.Completion() {
		t.Fatal("socket on another interface must share the UMEM with its own fill and completion rings")
	}
	if sb.Bound() != sa.Bound() {
		t.Errorf("shared socket bound %v, first %v", sb.Bound(), sa.Bound())
	}
	p := newTestProgram(t, a.name)
	if err := p.Register(0, sa); err != nil {
		t.Fatal(err)
	}
	fillFrames(t, sa, 0, 128)

	const k = 50
	inA := newPacketSocket(t, a.peerIdx)
	outB := newPacketSocket(t, b.peerIdx)
	for i := uint32(0); i < k; i++ {
		inA.send(t, testFrame(a.mac, a.peerMAC, i))
	}
	got := receive(t, sa, k)
	if len(got) != k {
		t.Fatalf("received %d on %s, sent %d", len(got), a.name, k)
	}
	mem := u.Mem()
	for _, d := range got { // a forwarder's MAC rewrite, in place
		f := mem[d.Addr:]
		copy(f[0:6], b.peerMAC[:])
		copy(f[6:12], b.mac[:])
	}
	done := transmit(t, sb, got)
	if len(done) != k {
		t.Fatalf("%d completions on %s's ring, want %d", len(done), b.name, k)
	}
	for i, addr := range done {
		if addr != got[i].Addr {
			t.Errorf("completion %d is %#x, transmitted %#x", i, addr, got[i].Addr)
		}
	}
	if _, n := sa.Completion().Peek(1); n != 0 {
		t.Errorf("%s's completion ring has entries it did not transmit", a.name)
	}
	out := outB.recvAll(t, k, 2*time.Second, 100*time.Millisecond)
	if len(out) != k {
		t.Fatalf("%s received %d forwarded frames, want %d", b.peer, len(out), k)
	}
	for i, f := range out {
		want := testFrame(b.peerMAC, b.mac, uint32(i))
		copy(want[6:12], b.mac[:])
		orig := testFrame(a.mac, a.peerMAC, uint32(i))
		copy(orig[0:6], b.peerMAC[:])
		copy(orig[6:12], b.mac[:])
		if !bytes.Equal(f, orig) {
			t.Errorf("forwarded frame %d (seq %d) differs from the received one with rewritten MACs", i, seqOf(f))
		}
	}
}

// TestSharedUMEMSameQueue: a second socket on the same queue shares the
// first one's fill and completion rings; closing the first leaves them
// mapped for the second; the UMEM refuses to close while either is open.
func TestSharedUMEMSameQueue(t *testing.T) {
	requireRoot(t)
	inNewNetns(t)
	v := newVeth(t, "wfsq0", "wfsq1", 1)
	u := newTestUMEM(t, 65) // not a whole number of pages: the kernel takes it
	s1, err := NewSocket(u, smallOptions(v.name, 0))
	if err != nil {
		t.Fatal(err)
	}
	s2, err := NewSocket(u, smallOptions(v.name, 0)) // shares implicitly
	if err != nil {
		s1.Close()
		t.Fatal(err)
	}
	if s2.Fill() != s1.Fill() || s2.Completion() != s1.Completion() {
		t.Error("same-queue sharing socket has its own fill/completion rings")
	}
	if err := u.Close(); !errors.Is(err, ErrBusy) {
		t.Errorf("UMEM.Close with sockets open = %v, want ErrBusy", err)
	}
	if err := s1.Close(); err != nil {
		t.Fatal(err)
	}
	fillFrames(t, s2, 0, 8) // still mapped and usable
	if s2.Fill().Producer() != 8 {
		t.Errorf("fill producer %d after 8", s2.Fill().Producer())
	}
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s2.Close(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("second Close = %v, want net.ErrClosed", err)
	}
	if err := u.Close(); err != nil {
		t.Errorf("UMEM.Close after its sockets: %v", err)
	}
	// A shared socket may not ask for a mode the first was not granted.
	u2 := newTestUMEM(t, 64)
	s3 := newTestSocket(t, u2, smallOptions(v.name, 0))
	o := smallOptions(v.name, 0)
	o.Bind = BindZeroCopy
	if _, err := NewSocket(u2, o); err == nil || !strings.Contains(err.Error(), "inherits") {
		t.Errorf("shared socket asking for zerocopy under %v = %v, want an inherit error", s3.Bound(), err)
	}
}

// TestBindModesOnVeth: veth has no zero-copy, so BindZeroCopy fails with
// ErrNotSupported naming the interface, and BindAuto and BindCopy get copy.
func TestBindModesOnVeth(t *testing.T) {
	requireRoot(t)
	inNewNetns(t)
	v := newVeth(t, "wfbm0", "wfbm1", 1)
	u := newTestUMEM(t, 64)
	before := openFDs(t)
	o := smallOptions(v.name, 0)
	o.Bind = BindZeroCopy
	_, err := NewSocket(u, o)
	if !errors.Is(err, ErrNotSupported) || !errors.Is(err, unix.EOPNOTSUPP) || !strings.Contains(err.Error(), v.name) {
		t.Errorf("zero-copy bind on veth = %v, want ErrNotSupported and EOPNOTSUPP naming %s", err, v.name)
	}
	if after := openFDs(t); after != before {
		t.Errorf("failed bind leaked %d fds", after-before)
	}
	for _, m := range []BindMode{BindAuto, BindCopy} {
		o.Bind = m
		s, err := NewSocket(u, o)
		if err != nil {
			t.Fatalf("%v: %v", m, err)
		}
		if s.Bound() != BindCopy {
			t.Errorf("%v: bound %v, want copy", m, s.Bound())
		}
		s.Close()
	}
}

// TestBindErrors: a queue another socket holds, a queue out of range, and
// a missing interface each get their own clear error.
func TestBindErrors(t *testing.T) {
	requireRoot(t)
	inNewNetns(t)
	v := newVeth(t, "wfbe0", "wfbe1", 1)
	u1 := newTestUMEM(t, 64)
	u2 := newTestUMEM(t, 64)
	newTestSocket(t, u1, smallOptions(v.name, 0))
	before := openFDs(t)
	_, err := NewSocket(u2, smallOptions(v.name, 0))
	if !errors.Is(err, ErrBusy) || !errors.Is(err, unix.EBUSY) || !strings.Contains(err.Error(), "already bound") ||
		!strings.Contains(err.Error(), "queue 0") || !strings.Contains(err.Error(), v.name) {
		t.Errorf("second bind of %s queue 0 = %v, want ErrBusy naming the queue", v.name, err)
	}
	if after := openFDs(t); after != before {
		t.Errorf("refused bind leaked %d fds", after-before)
	}
	_, err = NewSocket(u2, smallOptions(v.name, 3))
	if err == nil || !strings.Contains(err.Error(), "out of range") || !strings.Contains(err.Error(), "1 queue") {
		t.Errorf("bind of queue 3 on a 1-queue veth = %v, want out of range", err)
	}
	_, err = NewSocket(u2, smallOptions("wf-missing", 0))
	if !errors.Is(err, unix.ENODEV) || !strings.Contains(err.Error(), "wf-missing") {
		t.Errorf("bind on a missing interface = %v, want ENODEV naming it", err)
	}
	p := newTestProgram(t, v.name)
	s2 := newTestSocket(t, u2, smallOptions("lo", 0))
	if err := p.Register(0, s2); err == nil || !strings.Contains(err.Error(), "lo queue 0") {
		t.Errorf("registering a socket of lo on %s = %v, want refusal", v.name, err)
	}
}

// TestFillRingEmpty: frames that arrive with nothing on the fill ring are
// redirected by the program but dropped by the socket, and Stats counts
// each; once frames are filled, reception resumes.
func TestFillRingEmpty(t *testing.T) {
	requireRoot(t)
	inNewNetns(t)
	v := newVeth(t, "wffe0", "wffe1", 1)
	u := newTestUMEM(t, 64)
	s := newTestSocket(t, u, smallOptions(v.name, 0))
	p := newTestProgram(t, v.name)
	if err := p.Register(0, s); err != nil {
		t.Fatal(err)
	}
	peer := newPacketSocket(t, v.peerIdx)
	const k = 10
	for i := uint32(0); i < k; i++ {
		peer.send(t, testFrame(v.mac, v.peerMAC, i))
	}
	if got := receive(t, s, 1); len(got) != 0 {
		t.Fatalf("received %d frames with an empty fill ring", len(got))
	}
	st, err := s.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.RXDropped != k || st.RXFillRingEmpty != k {
		t.Errorf("stats %+v, want %d dropped for an empty fill ring", st, k)
	}
	if err := s.WakeRX(); err != nil {
		t.Errorf("WakeRX: %v", err)
	}
	fillFrames(t, s, 0, 16)
	for i := uint32(0); i < k; i++ {
		peer.send(t, testFrame(v.mac, v.peerMAC, i))
	}
	if got := receive(t, s, k); len(got) != k {
		t.Errorf("received %d after filling, want %d", len(got), k)
	}
}

// TestNeedWakeupAndBusyPoll: with need-wakeup the kernel flags the TX
// ring (copy mode needs a sendto to start sending); without it KickTX
// kicks every time; the busy-poll options reach the socket.
func TestNeedWakeupAndBusyPoll(t *testing.T) {
	requireRoot(t)
	inNewNetns(t)
	v := newVeth(t, "wfnw0", "wfnw1", 1)
	u1 := newTestUMEM(t, 64)
	o := smallOptions(v.name, 0)
	o.BusyPoll = BusyPollOptions{Prefer: true, Usec: 20, Budget: 32}
	s := newTestSocket(t, u1, o)
	if !s.NeedWakeup() || !s.TX().NeedWakeup() {
		t.Errorf("need wakeup: socket %v, tx flag %v; want both set in copy mode", s.NeedWakeup(), s.TX().NeedWakeup())
	}
	for _, c := range []struct {
		name     string
		opt, val int
	}{{"SO_PREFER_BUSY_POLL", unix.SO_PREFER_BUSY_POLL, 1}, {"SO_BUSY_POLL", unix.SO_BUSY_POLL, 20}} { // SO_BUSY_POLL_BUDGET cannot be read back
		got, err := unix.GetsockoptInt(s.FD(), unix.SOL_SOCKET, c.opt)
		if err != nil || got != c.val {
			t.Errorf("%s = %d, %v; want %d", c.name, got, err, c.val)
		}
	}
	s.Close()
	u2 := newTestUMEM(t, 64)
	o = smallOptions(v.name, 0)
	o.NeedWakeup = false
	s = newTestSocket(t, u2, o)
	if s.NeedWakeup() {
		t.Error("socket bound without XDP_USE_NEED_WAKEUP reports it")
	}
	// Without need-wakeup KickTX always makes the syscall (the kernel's
	// flag means nothing then): a frame goes out and completes.
	copy(u2.Mem()[0:], testFrame(v.peerMAC, v.mac, 1))
	if done := transmit(t, s, []rings.Desc{{Addr: 0, Len: 64}}); len(done) != 1 || done[0] != 0 {
		t.Errorf("completions %v without need-wakeup, want [0]", done)
	}
}

// TestInterfaceDeleted: deleting the interface under a socket shows as
// ENETDOWN from Err within a second (poll reports nothing), and it sticks.
func TestInterfaceDeleted(t *testing.T) {
	requireRoot(t)
	inNewNetns(t)
	v := newVeth(t, "wfdel0", "wfdel1", 1)
	u := newTestUMEM(t, 64)
	s := newTestSocket(t, u, smallOptions(v.name, 0))
	if err := s.Err(); err != nil {
		t.Fatalf("Err on a healthy socket: %v", err)
	}
	if n := allocs.Count(20, func() { s.Err() }); n != 0 {
		t.Errorf("Err on a healthy socket allocated %d times in 20 calls, want 0 (an idle I/O loop calls it)", n)
	}
	l, err := netlink.LinkByName(v.name)
	if err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkDel(l); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for s.Err() == nil && time.Since(start) < time.Second {
		time.Sleep(5 * time.Millisecond)
	}
	if err := s.Err(); !errors.Is(err, unix.ENETDOWN) || !strings.Contains(err.Error(), v.name) {
		t.Fatalf("Err %v after deleting %s (waited %v), want ENETDOWN naming it", err, v.name, time.Since(start))
	}
	if err := s.Err(); !errors.Is(err, unix.ENETDOWN) {
		t.Errorf("second Err = %v: the error must stick", err)
	}
}

// TestCloseReleasesEverything: a UMEM, two sockets (one sharing), a
// program and its registrations, all closed, leave the fd count as it was
// and the interface without an XDP program.
func TestCloseReleasesEverything(t *testing.T) {
	requireRoot(t)
	inNewNetns(t)
	a := newVeth(t, "wfcl0", "wfcl1", 1)
	b := newVeth(t, "wfcm0", "wfcm1", 1)
	before := openFDs(t)
	u, err := NewUMEM(DefaultUMEMOptions())
	if err != nil {
		t.Fatal(err)
	}
	sa, err := NewSocket(u, smallOptions(a.name, 0))
	if err != nil {
		t.Fatal(err)
	}
	ob := smallOptions(b.name, 0)
	ob.SharedWith = sa
	sb, err := NewSocket(nil, ob)
	if err != nil {
		t.Fatal(err)
	}
	p, err := LoadProgram(ProgramOptions{Interface: a.name})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Register(0, sa); err != nil {
		t.Fatal(err)
	}
	if openFDs(t) <= before {
		t.Fatal("nothing was opened")
	}
	for _, c := range []func() error{p.Close, sb.Close, sa.Close, u.Close} {
		if err := c(); err != nil {
			t.Fatal(err)
		}
	}
	if after := openFDs(t); after != before {
		t.Errorf("%d fds before, %d after Close", before, after)
	}
	l, _ := netlink.LinkByName(a.name)
	if x := l.Attrs().Xdp; x != nil && x.Attached {
		t.Errorf("%s still has an XDP program after Close: %+v", a.name, x)
	}
	if _, err := sa.Stats(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Stats after Close = %v, want net.ErrClosed", err)
	}
	if _, err := sa.Poll(0); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Poll after Close = %v, want net.ErrClosed", err)
	}
	if err := sa.Err(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Err after Close = %v, want net.ErrClosed", err)
	}
	for name, c := range map[string]func() error{"program": p.Close, "socket": sa.Close, "umem": u.Close} {
		if err := c(); !errors.Is(err, net.ErrClosed) {
			t.Errorf("second %s Close = %v, want net.ErrClosed", name, err)
		}
	}
}
