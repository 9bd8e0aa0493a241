package daemon_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
	"github.com/warpflow/warpflow/internal/control"

	"github.com/warpflow/warpflow/internal/testwait"
)

// The live conntrack pipelines: the same conntrack stage (two steered
// workers) and different filter rules.
const (
	liveCTA = `name: cta
settings: {batch_size: 64, workers: 2}
stages:
  - {name: parse, type: parse}
  - {name: ct, type: conntrack, size: 4096}
  - name: acl
    type: filter
    default: rewrite
    rules:
      - {ct: invalid, action: "drop:invalid"}
      - {proto: udp, dst_port: 9, action: "drop:a_nine"}
  - {name: rewrite, type: rewrite, src_mac: "02:77:66:00:00:03", dst_mac: "02:77:66:00:00:04"}
  - {name: out, type: tx, port: out0}
`
	liveCTB = `name: ctb
settings: {batch_size: 64, workers: 2}
stages:
  - {name: parse, type: parse}
  - {name: ct, type: conntrack, size: 4096}
  - name: acl
    type: filter
    default: rewrite
    rules:
      - {ct: invalid, action: "drop:invalid"}
      - {proto: udp, dst_port: 7, action: "drop:b_seven"}
  - {name: rewrite, type: rewrite, src_mac: "02:77:66:00:00:03", dst_mac: "02:77:66:00:00:04"}
  - {name: out, type: tx, port: out0}
`
)

// liveCTHuge is liveCTA with tables no test machine holds: 2 workers,
// each a conntrack table of 64M flows and a full reassembly table of 1M
// datagrams of 64 KiB, some 150 GiB in all.
var liveCTHuge = strings.Replace(strings.Replace(liveCTA, "name: cta", "name: cthuge", 1),
	"  - {name: ct, type: conntrack, size: 4096}",
	"  - {name: ra, type: reassemble, mode: full, max_datagrams: 1048576, max_bytes: 65535}\n  - {name: ct, type: conntrack, size: 67108864}", 1)

// TestLiveTablesTooBigAtStart: warpflowd started on a pipeline whose
// tables the machine cannot hold exits at once with the figures (before
// this check it started, and the first traffic would have had the OOM
// killer end it). A machine with over 170 GiB free would start it: this
// test then fails.
func TestLiveTablesTooBigAtStart(t *testing.T) {
	requireLive(t)
	topo := newLab(t)
	p := writePipeline(t, t.TempDir(), "cthuge", liveCTHuge)
	d := startDaemon(t, topo.DP0.Namespace, "--config", labConfig(t, p, "workers_per_queue: 2\n"))
	if code := d.wait(t, 30*time.Second); code == 0 {
		t.Fatalf("warpflowd ran a pipeline of some 150 GiB of tables:\n%s", d.log())
	}
	if l := d.log(); !strings.Contains(l, "stage tables need") || !strings.Contains(l, "this process can still take") {
		t.Fatalf("warpflowd exited without saying why in figures:\n%s", l)
	}
}

// flowCapture writes n UDP packets of flows source ports 41000..+sports-1
// to the destination ports 7, 9, 53, 80, in turn.
func flowCapture(t *testing.T, n, sports int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "flows.pcap")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := pcapgo.NewWriter(f)
	if err := w.WriteFileHeader(2048, layers.LinkTypeEthernet); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		pkt := make([]byte, 64)
		copy(pkt, []byte{0x02, 0x77, 0x66, 0, 0, 0x02, 0x02, 0x77, 0x66, 0, 0, 0x01, 0x08, 0x00})
		ip := pkt[14:34]
		copy(ip, []byte{0x45, 0, 0, 50, 0, 1, 0, 0, 64, 17, 0, 0, 10, 77, 0, 1, 10, 77, 0, 2})
		binary.BigEndian.PutUint16(ip[10:], ipChecksum(ip))
		udp := pkt[34:42]
		binary.BigEndian.PutUint16(udp[0:], uint16(41000+(i/len(liveDstPorts))%sports))
		binary.BigEndian.PutUint16(udp[2:], liveDstPorts[i%len(liveDstPorts)])
		binary.BigEndian.PutUint16(udp[4:], 30) // no UDP checksum: valid for IPv4
		ci := gopacket.CaptureInfo{Timestamp: time.Unix(0, 0), CaptureLength: len(pkt), Length: len(pkt)}
		if err := w.WritePacket(ci, pkt); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

// TestLiveConntrack runs a conntrack pipeline on two steered workers in
// warpflowd: flows are tracked under live traffic, 20 swaps between two
// pipelines with the same conntrack stage keep the table (the replies say
// so and no flow is lost), and warpctl conntrack counts, lists and
// flushes what the filters select.
func TestLiveConntrack(t *testing.T) {
	requireLive(t, "tcpreplay")
	dir := t.TempDir()
	pa, pb := writePipeline(t, dir, "cta", liveCTA), writePipeline(t, dir, "ctb", liveCTB)
	const sports, n = 50, 20000
	capture := flowCapture(t, n, sports)
	topo := newLab(t)
	// Two workers behind the queue's I/O loop: flows steered to them.
	lc := startControlled(t, topo, pa, swapBuffers+"workers_per_queue: 2\n", pb)
	d, sock, c, ctx := lc.d, lc.sock, lc.c, context.Background()
	sent := make(chan int, 1)
	go func() { sent <- tcpreplay(t, topo, capture, 10000) }()
	waitTraffic(t, c, 2000)
	for i := range 20 {
		to := "ctb"
		if i%2 == 1 {
			to = "cta"
		}
		rep, err := c.Swap(ctx, to)
		if err != nil {
			t.Fatalf("swap %d: %v", i, err)
		}
		if !reflect.DeepEqual(rep.StateKept, []string{"ct"}) || len(rep.StateReset) != 0 {
			t.Fatalf("swap %d: state kept %v, reset %v", i, rep.StateKept, rep.StateReset)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := testwait.Recv(t, sent, fmt.Sprintf("tcpreplay to send %d packets at 10 kpps", n), replayWithin(n, 10000)); got != n {
		t.Fatalf("tcpreplay sent %d of %d", got, n)
	}
	st := statsAfterReplay(t, c, topo, n)
	// The stateful pipeline asked for a symmetric RSS key on the
	// receiving veth, which has no RSS: stats says so.
	if len(st.RSS) == 0 {
		t.Fatal("stats has no rss outcome for a stateful pipeline's receiving interface")
	}
	for _, r := range st.RSS {
		if r.Result != "unsupported" || !strings.Contains(r.Detail, "veth") {
			t.Fatalf("rss on the lab's veth: %+v, want unsupported", r)
		}
	}
	if n := dropped(st.Totals, "invalid"); n != 0 {
		t.Fatalf("%d packets invalid: a flow's entry was lost", n)
	}
	// Every flow to 53 and 80 (both pipelines pass them), and those to 7
	// or 9 that one of the pipelines let through, are in the table.
	out, stderr, code := warpctl(t, sock, "conntrack", "count", "--json")
	var cnt control.ConntrackReply
	if code != 0 || json.Unmarshal([]byte(out), &cnt) != nil {
		t.Fatalf("conntrack count: exit %d %s\n%s", code, stderr, out)
	}
	if cnt.Entries < 2*sports || cnt.Entries > 4*sports || cnt.Capacity != 2*4096 || cnt.BytesPerFlow > 128 {
		t.Fatalf("count: %+v (want %d to %d flows, two workers' tables)", cnt, 2*sports, 4*sports)
	}
	out, _, code = warpctl(t, sock, "conntrack", "list", "--json", "--dport", "53", "--proto", "udp")
	var l control.ConntrackReply
	if code != 0 || json.Unmarshal([]byte(out), &l) != nil || l.Matched != sports || len(l.Flows) != sports {
		t.Fatalf("list dport 53: exit %d, %+v", code, l)
	}
	for _, f := range l.Flows {
		if f.DstPort != 53 || f.ProtoName != "udp" || f.Replied || f.Src != "10.77.0.1" {
			t.Fatalf("flow %+v", f)
		}
	}
	if _, stderr, code := warpctl(t, sock, "conntrack", "flush"); code != 2 || !strings.Contains(stderr, "--all") {
		t.Fatalf("flush without a filter: exit %d %s", code, stderr)
	}
	out, _, code = warpctl(t, sock, "conntrack", "flush", "--dport", "53")
	if code != 0 || !strings.Contains(out, "flushed 50 flows") {
		t.Fatalf("flush dport 53: exit %d %s", code, out)
	}
	out, _, _ = warpctl(t, sock, "conntrack", "count", "--json")
	var after control.ConntrackReply
	json.Unmarshal([]byte(out), &after)
	if after.Entries != cnt.Entries-sports {
		t.Fatalf("after flushing %d: %d flows, had %d", sports, after.Entries, cnt.Entries)
	}
	// The stage's counters reach stats: occupancy and inserts.
	entries, inserts := stageCounter(st, "ct", "entries"), stageCounter(st, "ct", "inserts")
	if entries != uint64(cnt.Entries) || inserts < uint64(cnt.Entries) {
		t.Fatalf("stats: entries %d inserts %d, table %d", entries, inserts, cnt.Entries)
	}
	// A pipeline whose tables the machine cannot hold (2 workers, each a
	// conntrack table of 64M flows and a full reassembly table of 1M
	// datagrams of 64 KiB: some 150 GiB) is refused at its swap, with the
	// figures, before any table is allocated: the daemon keeps running
	// the pipeline it had, its flows intact. (A machine with over 170 GiB
	// free would take the swap: this test then fails.)
	if _, stderr, code := warpctl(t, sock, "pipeline", "load", writePipeline(t, dir, "cthuge", liveCTHuge)); code != 0 {
		t.Fatalf("pipeline load cthuge: exit %d: %s", code, stderr)
	}
	if _, err := c.Swap(ctx, "cthuge"); err == nil || !strings.Contains(err.Error(), "stage tables need") || !strings.Contains(err.Error(), "this process can still take") {
		t.Fatalf("swap to tables of some 150 GiB: %v", err)
	}
	rep, err := c.Swap(ctx, "ctb")
	if err != nil || !reflect.DeepEqual(rep.StateKept, []string{"ct"}) {
		t.Fatalf("after the refused swap, to ctb: %v, kept %v", err, rep.StateKept)
	}
	out, _, _ = warpctl(t, sock, "conntrack", "count", "--json")
	var kept control.ConntrackReply
	json.Unmarshal([]byte(out), &kept)
	if kept.Entries != after.Entries {
		t.Fatalf("after the refused swap: %d flows, had %d", kept.Entries, after.Entries)
	}
	if code := d.stop(t, syscall.SIGTERM, 10*time.Second); code != 0 {
		t.Fatalf("warpflowd exited %d", code)
	}
}

// TestLiveIdleFlowsExpire: warpflowd on a live link, a conntrack stage
// with a UDP timeout of 1 s on two steered workers; the traffic stops,
// and within the timeout and one sweep period (10 s) warpctl conntrack
// count says the table is empty and stats counts every flow expired. An
// idle worker hears the engine's clock (ticks); before, its clock stood
// at its last packet and the flows stayed, listed and counted, until
// traffic came back.
func TestLiveIdleFlowsExpire(t *testing.T) {
	requireLive(t, "tcpreplay")
	idle := strings.Replace(strings.Replace(liveCTA, "name: cta", "name: ctidle", 1),
		"{name: ct, type: conntrack, size: 4096}", "{name: ct, type: conntrack, size: 4096, timeouts: {udp: 1}}", 1)
	p := writePipeline(t, t.TempDir(), "ctidle", idle)
	const sports, n = 25, 400 // 25 source ports x 4 destination ports: 100 flows, some dropped by the filter
	capture := flowCapture(t, n, sports)
	topo := newLab(t)
	lc := startControlled(t, topo, p, "workers_per_queue: 2\n")
	if got := tcpreplay(t, topo, capture, 1000); got != n {
		t.Fatalf("tcpreplay sent %d of %d", got, n)
	}
	st := statsAfterReplay(t, lc.c, topo, n)
	inserts := stageCounter(st, "ct", "inserts")
	if inserts < sports {
		t.Fatalf("%d flows inserted, want at least %d", inserts, sports)
	}
	count := func() control.ConntrackReply {
		out, stderr, code := warpctl(t, lc.sock, "conntrack", "count", "--json")
		var r control.ConntrackReply
		if code != 0 || json.Unmarshal([]byte(out), &r) != nil {
			t.Fatalf("conntrack count: exit %d %s\n%s", code, stderr, out)
		}
		return r
	}
	start := time.Now()
	for {
		c := count()
		if c.Entries == 0 {
			break
		}
		if time.Since(start) > 20*time.Second {
			t.Fatalf("%d flows still in the table %v after the traffic stopped (UDP timeout 1 s, sweep period 10 s)", c.Entries, time.Since(start).Round(time.Millisecond))
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("the table emptied %v after the traffic stopped", time.Since(start).Round(time.Millisecond))
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		s, err := lc.c.Stats(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		exp, ent := stageCounter(s, "ct", "expiries"), stageCounter(s, "ct", "entries")
		if exp == stageCounter(s, "ct", "inserts") && ent == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stats after the table emptied: expiries %d, entries %d, inserts %d", exp, ent, stageCounter(s, "ct", "inserts"))
		}
	}
	if code := lc.d.stop(t, syscall.SIGTERM, 10*time.Second); code != 0 {
		t.Fatalf("warpflowd exited %d", code)
	}
}
