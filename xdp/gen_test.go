package xdp

import (
	"encoding/binary"
	"errors"
	"net"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/warpflow/warpflow/internal/testwait"
)

func requireGenRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("needs root (CAP_BPF, CAP_SYS_ADMIN), and CI=true forbids skipping")
	}
	t.Skip("needs root (CAP_BPF, CAP_SYS_ADMIN)")
}

// genUDPFrame is a 64-byte Ethernet/IPv4/UDP frame, source port 1024, with a
// non-zero UDP checksum field.
func genUDPFrame() []byte {
	f := make([]byte, 64)
	binary.BigEndian.PutUint16(f[12:], 0x0800)
	f[14] = 0x45
	binary.BigEndian.PutUint16(f[16:], 50)
	f[23] = 17
	binary.BigEndian.PutUint16(f[34:], 1024)
	binary.BigEndian.PutUint16(f[36:], 9)
	binary.BigEndian.PutUint16(f[38:], 30)
	binary.BigEndian.PutUint16(f[40:], 0xbeef)
	return f
}

// genRunRaw runs the generator program once on frame without live frames,
// the way BPF_PROG_TEST_RUN reports a verdict and the output bytes.
func genRunRaw(t *testing.T, g *LiveGen, frame []byte) (uint32, []byte) {
	t.Helper()
	out := make([]byte, len(frame)+256)
	ret, err := g.objs.GenTx.Run(&ebpf.RunOptions{Data: frame, DataOut: out})
	if err != nil {
		t.Fatal(err)
	}
	return ret, out[:len(frame)]
}

// TestGenProgramRaw checks the program on raw bytes: XDP_TX with the flow's
// source port and checksum 0 in sequence, frames that are not IPv4/UDP sent
// unchanged and counted, and XDP_DROP past the limit.
func TestGenProgramRaw(t *testing.T) {
	requireGenRoot(t)
	g, err := NewLiveGen(LiveGenOptions{Flows: 3, BasePort: 5000})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if err := g.SetLimit(5); err != nil {
		t.Fatal(err)
	}
	const xdpDrop, xdpTX = 1, 3
	for i, want := range []uint16{5000, 5001, 5002, 5000} {
		ret, out := genRunRaw(t, g, genUDPFrame())
		if ret != xdpTX {
			t.Fatalf("run %d: verdict %d, want XDP_TX", i, ret)
		}
		if p, c := binary.BigEndian.Uint16(out[34:]), binary.BigEndian.Uint16(out[40:]); p != want || c != 0 {
			t.Errorf("run %d: source port %d checksum %#x, want %d, 0", i, p, c, want)
		}
	}
	arp := genUDPFrame()
	binary.BigEndian.PutUint16(arp[12:], 0x0806)
	if ret, out := genRunRaw(t, g, arp); ret != xdpTX || string(out) != string(arp) {
		t.Errorf("non-IPv4 frame: verdict %d, changed %v; want XDP_TX unchanged", ret, string(out) != string(arp))
	}
	if ret, _ := genRunRaw(t, g, genUDPFrame()); ret != xdpDrop {
		t.Errorf("run past the limit: verdict %d, want XDP_DROP", ret)
	}
	c, err := g.Counts()
	if err != nil {
		t.Fatal(err)
	}
	if c != (LiveGenCounts{Sent: 5, Over: 1, Unchanged: 1}) {
		t.Errorf("counts %+v, want sent 5 over 1 unchanged 1", c)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if err := g.Close(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("second Close: %v, want net.ErrClosed", err)
	}
	if _, err := g.Counts(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Counts after Close: %v", err)
	}
}

func TestLiveGenOptions(t *testing.T) {
	for _, o := range []LiveGenOptions{{Flows: 0}, {Flows: MaxGenFlows + 1}, {Flows: 10, BasePort: 65530}, {Flows: 1, BatchSize: 257}} {
		if g, err := NewLiveGen(o); err == nil {
			g.Close()
			t.Errorf("NewLiveGen(%+v): want an error", o)
		}
	}
}

// BenchmarkGenRunLoop measures the program's own cost per run in
// BPF_PROG_RUN (no live frames, so nothing is transmitted).
func BenchmarkGenRunLoop(b *testing.B) {
	requireGenRoot(b)
	g, err := NewLiveGen(LiveGenOptions{Flows: 16, BasePort: 1000})
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close()
	g.SetLimit(^uint64(0))
	b.ReportAllocs()
	b.ResetTimer()
	if _, err := g.objs.GenTx.Run(&ebpf.RunOptions{Data: genUDPFrame(), Repeat: uint32(b.N)}); err != nil {
		b.Fatal(err)
	}
}

// TestGenPinnedCallsAreCheap: with the program held in the XDP dispatcher,
// a live-frame call with Repeat > 1 costs microseconds; without the pin
// each costs two RCU grace periods (~24 ms measured here). Ten calls must
// take well under what two grace periods each would. The frames go to the
// loopback device of a private namespace, which has no XDP transmit and
// drops them.
func TestGenPinnedCallsAreCheap(t *testing.T) {
	requireGenRoot(t)
	g, err := NewLiveGen(LiveGenOptions{Flows: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if err := g.Pinned(); err != nil {
		t.Fatalf("not pinned: %v", err)
	}
	if err := g.SetLimit(1 << 20); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	var took time.Duration
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies in its private namespace
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errc <- err
			return
		}
		t0 := time.Now()
		for range 10 {
			if err := g.Run(1, 0, genUDPFrame(), 2); err != nil {
				errc <- err
				return
			}
		}
		took = time.Since(t0)
		errc <- nil
	}()
	if err := testwait.Recv(t, errc, "the ten live-frame calls from a private namespace", testwait.Deadline); err != nil {
		t.Fatal(err)
	}
	if took > 100*time.Millisecond {
		t.Errorf("10 live-frame calls took %s: the dispatcher pin is not working", took)
	}
	c, err := g.Counts()
	if err != nil || c.Sent != 20 {
		t.Errorf("counts %+v, %v; want 20 sent", c, err)
	}
}
