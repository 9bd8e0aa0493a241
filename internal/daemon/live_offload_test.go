package daemon_test

import (
	"bytes"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// liveSplitPipeline forwards mixed.pcap's traffic after an ACL whose first
// rules the XDP program can run (class and ARP rules move but fire only on
// the workers; UDP, SYN and ICMP drops fire in the kernel).
const liveSplitPipeline = `name: lab-split
settings: {batch_size: 64, workers: 0}
stages:
  - {name: parse, type: parse}
  - name: acl
    type: filter
    default: accept
    rules:
      - {class: malformed, action: "drop:malformed"}
      - {proto: arp, action: "drop:arp"}
      - {proto: udp, action: "drop:udp"}
      - {proto: tcp, tcp_flags: "syn,!ack", action: "drop:syn"}
      - {proto: icmp, action: "drop:icmp"}
  - name: rewrite
    type: rewrite
    src_mac: "02:77:66:00:00:03"
    dst_mac: "02:77:66:00:00:04"
    ttl_decrement: true
  - {name: out, type: tx, port: out0}
`

// TestLiveOffloadMatchesReplay runs one pipeline live with the split
// (offload: auto) and without it (offload: none): both times the sink gets
// exactly the replay's frames and the drops by reason are the replay's;
// with the split the XDP program drops the kernel rules' frames it parses
// (all but a few here) before any socket sees them, and the counts balance
// with its decisions included.
func TestLiveOffloadMatchesReplay(t *testing.T) {
	requireLive(t, "tcpreplay", "tcpdump")
	pipeline := filepath.Join(t.TempDir(), "lab-split.yaml")
	if err := os.WriteFile(pipeline, []byte(liveSplitPipeline), 0o644); err != nil {
		t.Fatal(err)
	}
	const capture = "../../testdata/captures/mixed.pcap"
	want, wantFrames := replayOracle(t, pipeline, capture)
	kernelReasons := map[string]bool{"udp": true, "syn": true, "icmp": true}
	var wantKernel uint64
	for _, dc := range want.Drops {
		if kernelReasons[dc.Reason] {
			wantKernel += dc.Packets
		}
	}
	if wantKernel == 0 || len(wantFrames) == 0 {
		t.Fatalf("replay: %d kernel-rule drops, %d frames forwarded: the test needs both", wantKernel, len(wantFrames))
	}
	for _, mode := range []string{"auto", "none"} {
		t.Run(mode, func(t *testing.T) {
			topo := newLab(t)
			sink := startSinkCapture(t, topo)
			d := startDaemon(t, topo.DP0.Namespace, "--config", labConfig(t, pipeline, "offload: "+mode+"\n"), "--stats-interval", "50ms")
			split := d.waitFor(t, "pipeline split", 10*time.Second)
			wantMoved := map[string]uint64{"auto": 5, "none": 0}[mode]
			if num(split, "kernel_rules") != wantMoved {
				t.Errorf("split log %v: want %d kernel rules", split, wantMoved)
			}
			d.waitFor(t, "running", 5*time.Second)
			sent := tcpreplay(t, topo, capture, 20000)
			if sent != int(want.Received) {
				t.Fatalf("tcpreplay sent %d, the capture has %d", sent, want.Received)
			}
			waitReceived(t, d, uint64(sent))
			time.Sleep(100 * time.Millisecond) // settle, not a wait for a condition: the last frames through the sink's veth to tcpdump
			if code := d.stop(t, syscall.SIGTERM, 10*time.Second); code != 0 {
				t.Fatalf("warpflowd exited %d", code)
			}
			got := sink.stop(t)
			st := d.find("final stats")
			if st == nil {
				t.Fatalf("no final stats:\n%s", d.log())
			}
			// The kernel decides the kernel rules' frames it parses (not,
			// say, IPv6 with extension headers: those the workers drop).
			k := num(st, "xdp_dropped")
			if mode == "auto" && (k == 0 || k > wantKernel || k < wantKernel*9/10) || mode == "none" && k != 0 {
				t.Errorf("xdp_dropped %d (kernel-rule drops in the replay: %d)", k, wantKernel)
			}
			t.Logf("offload %s: %d of the %d drops by kernel rules made in the kernel", mode, k, wantKernel)
			if r, x := num(st, "received"), num(st, "xdp_redirected"); r != want.Received || x+k+num(st, "xdp_passed") != want.Received {
				t.Errorf("received %d, redirected %d, decided in the kernel %d; sent %d", r, x, k, want.Received)
			}
			if tx, dr := num(st, "transmitted"), num(st, "dropped")+num(st, "xdp_dropped"); tx != want.Transmitted || dr != want.Dropped {
				t.Errorf("transmitted %d dropped %d; replay %d %d", tx, dr, want.Transmitted, want.Dropped)
			}
			for _, dc := range want.Drops {
				if n := num(st, "drops", dc.Reason) + num(st, "xdp_drops", dc.Reason); n != dc.Packets {
					t.Errorf("drops[%s] = %d, replay %d", dc.Reason, n, dc.Packets)
				}
			}
			if b, _ := st["balanced"].(bool); !b {
				t.Errorf("balanced=%v", st["balanced"])
			}
			if len(got) != len(wantFrames) {
				t.Fatalf("sink captured %d frames, replay wrote %d", len(got), len(wantFrames))
			}
			for i := range got {
				if !bytes.Equal(got[i], wantFrames[i]) {
					t.Fatalf("frame %d differs", i)
				}
			}
		})
	}
}
