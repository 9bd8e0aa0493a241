package ctoracle

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
	"github.com/warpflow/warpflow/dataplane"
	"github.com/warpflow/warpflow/internal/convgen"
	"github.com/warpflow/warpflow/pipelines"
	"github.com/warpflow/warpflow/rings"
)

// The topology, all made by the test:
//
//	ns T                         ns R (the router: nftables)
//	a0 02:..:0a  <------------>  a1 02:00:00:00:00:02  172.31.1.1/24   clients 10.0.0.0/8 via 172.31.1.2
//	b0 02:..:0b  <------------>  b1 02:00:00:00:00:01  172.31.2.1/24   servers 198.51.100.0/24, 192.0.2.0/24 via 172.31.2.2
//	                                  (IPv6: 2001:db8:1::1/64 and 2001:db8:2::1/64; clients 2001:db8:a::/48, servers 2001:db8:b::/48)
//
// tcpreplay in T sends the capture in order, clients' packets (source in
// 10/8 or 2001:db8:a::/48) on a0 and the servers' on b0 (a tcpprep cache), paced. The router
// forwards them through conntrack and nftables and logs every packet it
// forwards or drops in its forward chain to NFLOG group 1 with a prefix
// naming its ct state and direction; tcpdump records the log and, in T,
// what the router sent out (a0 and b0, inbound). The capture's MAC
// addresses are the router's, so its frames need no rewriting.

const (
	macA1 = "02:00:00:00:00:02" // the clients' frames' destination (convgen's MACs)
	macB1 = "02:00:00:00:00:01"
	macA0 = "02:00:00:00:00:0a"
	macB0 = "02:00:00:00:00:0b"
	natIP = "192.0.2.1"
	vip   = "198.51.100.100" // DNAT: vip:8080 -> 198.51.100.5:80
	// IPv6: clients and servers on the two sides, no NAT (the nat stage
	// and the ruleset's nat table are IPv4 only), the same filter.
	clients6 = "2001:db8:a::/48"
	servers6 = "2001:db8:b::/48"
)

// A packet is followed through both routers by its key: an IPv4 packet's
// identification (the fragments of one datagram share theirs), an IPv6
// packet's flow label (which nothing on the way rewrites) above v6Key.
const v6Key = 1 << 20

// ruleset is the router's nftables, the oracle of pipelineYAML.
const ruleset = `
table ip wfnat {
	chain pre {
		type nat hook prerouting priority dstnat; policy accept;
		ip daddr 198.51.100.100 tcp dport 8080 dnat to 198.51.100.5:80
	}
	chain post {
		type nat hook postrouting priority srcnat; policy accept;
		ip saddr 10.0.0.0/8 snat to 192.0.2.1
	}
}
table inet wff {
	chain filt {
		type filter hook forward priority filter; policy accept;
		ct state invalid log group 1 prefix "inv" queue-threshold 1 drop
		ct state new ct direction original tcp dport 23 log group 1 prefix "blk" queue-threshold 1 drop
		ct state new ct direction original log group 1 prefix "new_o" queue-threshold 1
		ct state new ct direction reply log group 1 prefix "new_r" queue-threshold 1
		ct state established ct direction original log group 1 prefix "est_o" queue-threshold 1
		ct state established ct direction reply log group 1 prefix "est_r" queue-threshold 1
		ct state related ct direction original log group 1 prefix "rel_o" queue-threshold 1
		ct state related ct direction reply log group 1 prefix "rel_r" queue-threshold 1
		ct state untracked log group 1 prefix "untr" queue-threshold 1
	}
}
`

// pipelineYAML is the same policy in Warpflow: every class to a port of
// its own (so the test learns each packet's class), the blocked SYNs
// dropped (a drop, as in Linux, so that they leave no flow). One packet
// per batch, like the kernel's packet-at-a-time processing.
const pipelineYAML = `
name: oracle
settings: {batch_size: 1}
stages:
  - {name: parse, type: parse}
  - {name: defrag, type: reassemble}
  - {name: ct, type: conntrack}
  - name: nat
    type: nat
    conntrack: ct
    dnat: [{match: {proto: tcp, dst: 198.51.100.100, dst_port: 8080}, to: 198.51.100.5, port: 80}]
    snat: [{match: {src: 10.0.0.0/8}, to: 192.0.2.1}]
  - name: acl
    type: filter
    default: untr
    rules:
      - {ct: invalid, action: inv}
      - {ct: new, ct_dir: original, proto: tcp, dst_port: 23, action: "drop:blk"}
      - {ct: new, ct_dir: original, action: new_o}
      - {ct: new, ct_dir: reply, action: new_r}
      - {ct: established, ct_dir: original, action: est_o}
      - {ct: established, ct_dir: reply, action: est_r}
      - {ct: related, ct_dir: original, action: rel_o}
      - {ct: related, ct_dir: reply, action: rel_r}
  - {name: inv, type: tx, port: inv}
  - {name: new_o, type: tx, port: new_o}
  - {name: new_r, type: tx, port: new_r}
  - {name: est_o, type: tx, port: est_o}
  - {name: est_r, type: tx, port: est_r}
  - {name: rel_o, type: tx, port: rel_o}
  - {name: rel_r, type: tx, port: rel_r}
  - {name: untr, type: tx, port: untr}
`

var classPorts = []string{"inv", "new_o", "new_r", "est_o", "est_r", "rel_o", "rel_r", "untr"}

func requireTools(t *testing.T) {
	t.Helper()
	ci := os.Getenv("CI") == "true"
	if os.Geteuid() != 0 {
		if ci {
			t.Fatal("needs root (namespaces, nftables), and CI=true forbids skipping")
		}
		t.Skip("needs root: makes network namespaces and an nftables router")
	}
	for _, tool := range []string{"ip", "nft", "tcpreplay", "tcpprep", "tcpdump", "ethtool"} {
		if _, err := exec.LookPath(tool); err != nil {
			if ci {
				t.Fatalf("%s is missing (Debian: nftables, tcpreplay, tcpdump, iproute2, ethtool), and CI=true forbids skipping", tool)
			}
			t.Skipf("%s is missing (Debian packages nftables, tcpreplay, tcpdump)", tool)
		}
	}
}

func sh(t *testing.T, ns string, args ...string) string {
	t.Helper()
	if ns != "" {
		args = append([]string{"ip", "netns", "exec", ns}, args...)
	}
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// topology makes the two namespaces and returns their names.
func topology(t *testing.T) (r, tr string) {
	t.Helper()
	p := fmt.Sprintf("wfct-%d", os.Getpid())
	r, tr = p+"-r", p+"-t"
	for _, ns := range []string{r, tr} {
		exec.Command("ip", "netns", "del", ns).Run() // a leftover of a killed run
		sh(t, "", "ip", "netns", "add", ns)
		ns := ns
		t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	}
	// IPv6 is on in the router only (the traffic namespace just sends
	// and records frames); no autoconfiguration, so that the router sends
	// nothing of its own but MLD and neighbour discovery (multicast, or
	// to its permanent neighbours' MACs: not the frames the test reads).
	sh(t, tr, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1")
	sh(t, r, "sysctl", "-qw", "net.ipv6.conf.all.forwarding=1", "net.ipv6.conf.default.forwarding=1",
		"net.ipv6.conf.all.accept_ra=0", "net.ipv6.conf.default.accept_ra=0", "net.ipv6.conf.default.autoconf=0")
	sh(t, "", "ip", "link", "add", "a0", "netns", tr, "address", macA0, "type", "veth", "peer", "name", "a1", "netns", r, "address", macA1)
	sh(t, "", "ip", "link", "add", "b0", "netns", tr, "address", macB0, "type", "veth", "peer", "name", "b1", "netns", r, "address", macB1)
	for _, c := range [][]string{
		{r, "ip", "addr", "add", "172.31.1.1/24", "dev", "a1"},
		{r, "ip", "addr", "add", "172.31.2.1/24", "dev", "b1"},
		{r, "ip", "link", "set", "a1", "up"}, {r, "ip", "link", "set", "b1", "up"}, {r, "ip", "link", "set", "lo", "up"},
		{tr, "ip", "link", "set", "a0", "up"}, {tr, "ip", "link", "set", "b0", "up"},
		{r, "ip", "neigh", "add", "172.31.1.2", "lladdr", macA0, "dev", "a1", "nud", "permanent"},
		{r, "ip", "neigh", "add", "172.31.2.2", "lladdr", macB0, "dev", "b1", "nud", "permanent"},
		{r, "ip", "route", "add", "10.0.0.0/8", "via", "172.31.1.2"},
		{r, "ip", "route", "add", "198.51.100.0/24", "via", "172.31.2.2"},
		{r, "ip", "route", "add", "192.0.2.0/24", "via", "172.31.2.2"},
		{r, "ip", "-6", "addr", "add", "2001:db8:1::1/64", "dev", "a1", "nodad"},
		{r, "ip", "-6", "addr", "add", "2001:db8:2::1/64", "dev", "b1", "nodad"},
		{r, "ip", "-6", "neigh", "add", "2001:db8:1::2", "lladdr", macA0, "dev", "a1", "nud", "permanent"},
		{r, "ip", "-6", "neigh", "add", "2001:db8:2::2", "lladdr", macB0, "dev", "b1", "nud", "permanent"},
		{r, "ip", "-6", "route", "add", clients6, "via", "2001:db8:1::2"},
		{r, "ip", "-6", "route", "add", servers6, "via", "2001:db8:2::2"},
		// The router verifies checksums itself: without this veth marks
		// a frame from a packet socket CHECKSUM_UNNECESSARY and
		// conntrack never looks at it.
		{r, "ethtool", "-K", "a1", "rx", "off"}, {r, "ethtool", "-K", "b1", "rx", "off"},
		{tr, "ethtool", "-K", "a0", "tx", "off"}, {tr, "ethtool", "-K", "b0", "tx", "off"},
		{r, "sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf.default.rp_filter=0",
			"net.ipv4.conf.a1.rp_filter=0", "net.ipv4.conf.b1.rp_filter=0", "net.ipv4.conf.all.send_redirects=0",
			"net.ipv4.conf.a1.send_redirects=0", "net.ipv4.conf.b1.send_redirects=0"},
		// Warpflow's default: no loose pickup (Linux's default is 1).
		{r, "sysctl", "-qw", "net.netfilter.nf_conntrack_tcp_loose=0", "net.netfilter.nf_conntrack_checksum=1"},
	} {
		sh(t, c[0], c[1:]...)
	}
	rules := filepath.Join(t.TempDir(), "rules.nft")
	if err := os.WriteFile(rules, []byte(ruleset), 0o644); err != nil {
		t.Fatal(err)
	}
	sh(t, r, "nft", "-f", rules)
	return r, tr
}

// recorder is a tcpdump run, stopped by stop.
type recorder struct {
	cmd  *exec.Cmd
	file string
}

func record(t *testing.T, ns, iface, file string, extra ...string) *recorder {
	t.Helper()
	// --immediate-mode: without it libpcap hands packets over in blocks
	// on a timer, and the last block is lost when tcpdump is stopped.
	args := append([]string{"netns", "exec", ns, "tcpdump", "--immediate-mode", "-n", "-U", "-s", "0", "-i", iface, "-w", file}, extra...)
	cmd := exec.Command("ip", args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "listening on") {
				ready <- nil
				io.Copy(io.Discard, stderr)
				return
			}
		}
		ready <- fmt.Errorf("tcpdump on %s exited before listening", iface)
	}()
	select {
	case err := <-ready:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("tcpdump on %s did not start within 10 s", iface)
	}
	return &recorder{cmd: cmd, file: file}
}

func (r *recorder) stop(t *testing.T) {
	t.Helper()
	r.cmd.Process.Signal(os.Interrupt)
	done := make(chan error, 1)
	go func() { done <- r.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		r.cmd.Process.Kill()
		t.Fatalf("tcpdump writing %s did not stop within 10 s", r.file)
	}
}

// fragV4 splits an Ethernet/IPv4 frame into fragments of the given
// payload sizes (the last one takes the rest), DF cleared.
func fragV4(frame []byte, sizes ...int) [][]byte {
	ip := frame[14:]
	ihl := int(ip[0]&15) * 4
	payload := ip[ihl:int(binary.BigEndian.Uint16(ip[2:]))]
	var out [][]byte
	for off, i := 0, 0; off < len(payload); i++ {
		n := len(payload) - off
		if i < len(sizes) && sizes[i] < n {
			n = sizes[i]
		}
		f := append(append([]byte(nil), frame[:14+ihl]...), payload[off:off+n]...)
		h := f[14:]
		binary.BigEndian.PutUint16(h[2:], uint16(ihl+n))
		fo := uint16(off / 8)
		if off+n < len(payload) {
			fo |= 0x2000
		}
		binary.BigEndian.PutUint16(h[6:], fo)
		out = append(out, f)
		off += n
	}
	return out
}

func ipChecksum(h []byte) {
	h[10], h[11] = 0, 0
	var s uint32
	for i := 0; i+1 < len(h); i += 2 {
		s += uint32(h[i])<<8 | uint32(h[i+1])
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	binary.BigEndian.PutUint16(h[10:], ^uint16(s))
}

// kind says what a test packet is, for the explanations of differences.
type kind struct {
	conv  string // the conversation's name
	frag  string // "", "in-order", "out-of-order", "overlap"; "fragment" (corpus)
	index int
	note  string // corpus: what is malformed about the packet ("" when nothing)
	in    string // corpus: the tuple as sent
	// noFlow: Warpflow drops the packet by design where Linux forwards
	// it (explained), so its flow is in Linux's table only.
	noFlow bool
}

// conversations builds the capture: every packet gets a unique IPv4
// identification (the fragments of one datagram share theirs), which is
// how the test follows it through both routers.
func conversations() ([]convgen.Packet, map[uint32]kind) {
	var convs []*convgen.Conv
	names := map[*convgen.Conv]string{}
	start := time.Duration(0)
	// add starts a conversation from c to s, translated to nat (the zero
	// Endpoint: untranslated), 2 ms after the one before.
	add := func(name string, c, s string, cport, sport uint16, nat convgen.Endpoint) *convgen.Conv {
		cv := convgen.NewConv(convgen.Endpoint{Addr: netip.MustParseAddr(c), Port: cport}, convgen.Endpoint{Addr: netip.MustParseAddr(s), Port: sport},
			nat, start, 100*time.Microsecond, uint32(cport)*1000, uint32(cport)*3000)
		start += 2 * time.Millisecond
		convs = append(convs, cv)
		names[cv] = name
		return cv
	}
	next := func(name string, c, s string, cport uint16, sport uint16) *convgen.Conv {
		return add(name, c, s, cport, sport, convgen.Endpoint{Addr: netip.MustParseAddr(natIP), Port: cport})
	}
	for i := range 4 {
		next("tcp full", fmt.Sprintf("10.0.0.%d", 1+i), "198.51.100.1", uint16(40000+i), 80).Handshake().Data(0, 100).Data(1, 900).Data(0, 10).Close()
	}
	next("tcp reset mid-stream", "10.0.0.10", "198.51.100.2", 40100, 80).Handshake().Data(0, 50).Reset(1).Segment(0, "PA", 0, 0, 20)
	next("tcp client reset", "10.0.0.11", "198.51.100.2", 40101, 80).Handshake().Data(1, 60).Reset(0).Segment(1, "A", 0, 0, 0)
	next("tcp out of window", "10.0.0.12", "198.51.100.3", 40200, 443).Handshake().OutOfWindow().Data(1, 40).Segment(0, "A", 0, -200000, 0)
	next("tcp mid-stream, no flow", "10.0.0.13", "198.51.100.3", 40201, 443).Segment(0, "PA", 0, 0, 30).Segment(1, "A", 0, 0, 0)
	next("tcp syn to a blocked port", "10.0.0.14", "198.51.100.4", 40300, 23).Segment(0, "S", 0, 0, 0).Segment(1, "SA", 0, 1, 0)
	next("tcp syn retransmitted, synack", "10.0.0.15", "198.51.100.4", 40301, 22).Segment(0, "S", -1, 0, 0).Segment(0, "S", -1, 0, 0).Segment(1, "SA", -1, 0, 0).Segment(0, "A", 0, 0, 0)
	next("udp exchange and unreachable", "10.0.0.20", "198.51.100.6", 40400, 53).UDP(0, 30).UDP(1, 80).UDP(0, 20).Unreachable(3, netip.MustParseAddr("198.51.100.6"))
	next("udp one way", "10.0.0.21", "198.51.100.6", 40401, 9999).UDP(0, 10).UDP(0, 10)
	next("ping", "10.0.0.22", "198.51.100.7", 500, 0).Ping(0, 1).Ping(1, 1).Ping(0, 2).Ping(1, 2)
	next("lone echo reply", "10.0.0.23", "198.51.100.7", 501, 0).Ping(1, 1)
	dn := next("dnat port forward", "10.0.0.30", vip, 40500, 8080)
	dn.Real = convgen.Endpoint{Addr: netip.MustParseAddr("198.51.100.5"), Port: 80}
	dn.Handshake().Data(0, 40).Data(1, 400).Close()

	// IPv6: the same kinds of conversation, untranslated.
	next6 := func(name string, c, s string, cport uint16, sport uint16) *convgen.Conv {
		return add(name, c, s, cport, sport, convgen.Endpoint{})
	}
	for i := range 2 {
		next6("v6 tcp full", fmt.Sprintf("2001:db8:a::%d", 1+i), "2001:db8:b::1", uint16(42000+i), 80).Handshake().Data(0, 100).Data(1, 900).Data(0, 10).Close()
	}
	next6("v6 tcp reset mid-stream", "2001:db8:a::10", "2001:db8:b::2", 42100, 80).Handshake().Data(0, 50).Reset(1).Segment(0, "PA", 0, 0, 20)
	next6("v6 tcp out of window", "2001:db8:a::12", "2001:db8:b::3", 42200, 443).Handshake().OutOfWindow().Data(1, 40).Segment(0, "A", 0, -200000, 0)
	next6("v6 tcp mid-stream, no flow", "2001:db8:a::13", "2001:db8:b::3", 42201, 443).Segment(0, "PA", 0, 0, 30).Segment(1, "A", 0, 0, 0)
	next6("v6 tcp syn to a blocked port", "2001:db8:a::14", "2001:db8:b::4", 42300, 23).Segment(0, "S", 0, 0, 0).Segment(1, "SA", 0, 1, 0)
	u6 := next6("v6 udp exchange and unreachable", "2001:db8:a::20", "2001:db8:b::6", 42400, 53).UDP(0, 30).UDP(1, 80).UDP(0, 20)
	icmp6Unreachable(u6, 4)
	next6("v6 udp one way", "2001:db8:a::21", "2001:db8:b::6", 42401, 9999).UDP(0, 10).UDP(0, 10)
	p6 := next6("v6 ping", "2001:db8:a::22", "2001:db8:b::7", 600, 0)
	icmp6Echo(p6, 0, 1)
	icmp6Echo(p6, 1, 1)
	icmp6Echo(p6, 0, 2)
	icmp6Echo(p6, 1, 2)
	icmp6Echo(next6("v6 lone echo reply", "2001:db8:a::23", "2001:db8:b::7", 601, 0), 1, 1)
	// Neighbour discovery passes the filter untracked (as Linux's
	// noct_valid_new): a solicitation routed like any packet.
	icmp6Packet(next6("v6 neighbour solicitation", "2001:db8:a::24", "2001:db8:b::8", 0, 0), 0, 135, 0,
		append([]byte{0, 0, 0, 0}, netip.MustParseAddr("2001:db8:b::8").AsSlice()...))
	var pkts []convgen.Packet
	kinds := map[uint32]kind{}
	id := uint16(1)
	for _, p := range convgen.Merge(convs...) {
		conv := ""
		for cv, n := range names {
			for _, q := range cv.Pkts {
				if &q.Data[0] == &p.Data[0] {
					conv = n
				}
			}
		}
		key := uint32(id)
		if binary.BigEndian.Uint16(p.Data[12:]) == 0x86dd {
			// The flow label: outside every checksum.
			v := binary.BigEndian.Uint32(p.Data[14:])
			binary.BigEndian.PutUint32(p.Data[14:], v&^0xfffff|uint32(id))
			key = v6Key | uint32(id)
		} else {
			binary.BigEndian.PutUint16(p.Data[14+4:], id)
			ipChecksum(p.Data[14 : 14+int(p.Data[14]&15)*4])
		}
		kinds[key] = kind{conv: conv, index: int(id)}
		pkts = append(pkts, p)
		id++
	}
	// Fragmented UDP datagrams at the end: in order, out of order, and
	// one with an overlap.
	at := start + 10*time.Millisecond
	for _, f := range []struct {
		name  string
		order []int
		sizes []int
	}{{"in-order", []int{0, 1, 2}, []int{504, 504}}, {"out-of-order", []int{2, 0, 1}, []int{504, 504}}, {"overlap", []int{0, 1, 2}, []int{504, 496}}} {
		cv := convgen.NewConv(convgen.Endpoint{Addr: netip.MustParseAddr("10.0.0.40"), Port: 41000 + id}, convgen.EP("198.51.100.8:5353"), convgen.Endpoint{}, 0, 0, 0, 0)
		frame := cv.UDP(0, 1400).Pkts[0].Data
		binary.BigEndian.PutUint16(frame[14+6:], 0) // DF off
		binary.BigEndian.PutUint16(frame[14+4:], id)
		parts := fragV4(frame, f.sizes...)
		if f.name == "overlap" {
			// The second fragment starts 8 bytes into the first's data.
			parts = fragV4(frame, 504, 504)
			binary.BigEndian.PutUint16(parts[1][14+6:], 0x2000|uint16((504-8)/8))
		}
		for _, k := range f.order {
			p := parts[k]
			ipChecksum(p[14:34])
			pkts = append(pkts, convgen.Packet{Data: p, At: at})
			at += 100 * time.Microsecond
		}
		kinds[uint32(id)] = kind{conv: "udp datagram in fragments", frag: f.name, index: int(id)}
		id++
	}
	return pkts, kinds
}

// icmp6Packet adds an ICMPv6 message of type and code with body (after
// the checksum) to cv from dir.
func icmp6Packet(cv *convgen.Conv, dir int, typ, code uint8, body []byte) {
	src, dst := cv.Client.Addr, cv.Server.Addr
	if dir == 1 {
		src, dst = cv.Server.Addr, cv.Seen.Addr
	}
	at := cv.Start
	if n := len(cv.Pkts); n > 0 {
		at = cv.Pkts[n-1].At + cv.Step
	}
	ic := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(typ, code)}
	cv.Pkts = append(cv.Pkts, convgen.Packet{Data: convgen.Frame(src, dst, dir, layers.IPProtocolICMPv6, ic, body), At: at, Dir: dir})
}

// icmp6Echo adds an echo request (dir 0) or reply (dir 1) with the
// identifier Client.Port.
func icmp6Echo(cv *convgen.Conv, dir int, seq uint16) {
	typ := uint8(layers.ICMPv6TypeEchoRequest)
	if dir == 1 {
		typ = layers.ICMPv6TypeEchoReply
	}
	body := binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint16(nil, cv.Client.Port), seq)
	icmp6Packet(cv, dir, typ, 0, append(body, make([]byte, 16)...))
}

// icmp6Unreachable adds a destination unreachable of code from the
// server about the conversation's last client packet (quoting its first
// 64 bytes of IP).
func icmp6Unreachable(cv *convgen.Conv, code uint8) {
	for i := len(cv.Pkts) - 1; i >= 0; i-- {
		if cv.Pkts[i].Dir == 0 {
			d := cv.Pkts[i].Data[14:]
			icmp6Packet(cv, 1, layers.ICMPv6TypeDestinationUnreachable, code, append([]byte{0, 0, 0, 0}, d[:min(len(d), 64)]...))
			return
		}
	}
}

// outcome is what one router did with one packet (by its key).
type outcome struct {
	class   string // nflog prefix / Warpflow port; "" when it saw no class
	dropped bool
	tuple   string // as forwarded: src:sport > dst:dport
	count   int    // packets with this id that came out (fragments)
	payload int    // their IP payload bytes (a datagram's, for fragments)
	ckErr   string
}

// ipHeader returns an Ethernet frame's IP packet (v4 or v6), or nil.
func ipHeader(p []byte) []byte {
	if len(p) < 14 {
		return nil
	}
	switch binary.BigEndian.Uint16(p[12:]) {
	case 0x0800:
		if len(p) >= 34 && p[14]>>4 == 4 {
			return p[14:]
		}
	case 0x86dd:
		if len(p) >= 54 && p[14]>>4 == 6 {
			return p[14:]
		}
	}
	return nil
}

// keyOf returns the key of the IP packet ip (see v6Key).
func keyOf(ip []byte) (uint32, bool) {
	switch {
	case len(ip) >= 20 && ip[0]>>4 == 4:
		return uint32(binary.BigEndian.Uint16(ip[4:])), true
	case len(ip) >= 40 && ip[0]>>4 == 6:
		return v6Key | binary.BigEndian.Uint32(ip[0:4])&0xfffff, true
	}
	return 0, false
}

// l4Of walks an IP packet's headers to its L4 header: the protocol, the
// offset, whether it is a later fragment (no L4 header) or a fragment at
// all. ok is false when the headers do not fit.
func l4Of(ip []byte) (proto uint8, off int, later, frag, ok bool) {
	if ip[0]>>4 == 4 {
		fo := binary.BigEndian.Uint16(ip[6:])
		return ip[9], int(ip[0]&15) * 4, fo&0x1fff != 0, fo&0x3fff != 0, true
	}
	nh, off := ip[6], 40
	for {
		switch nh {
		case 0, 43, 60: // hop-by-hop, routing, destination options
			if off+8 > len(ip) {
				return 0, 0, false, false, false
			}
			nh, off = ip[off], off+(int(ip[off+1])+1)*8
		case 44: // fragment
			if off+8 > len(ip) {
				return 0, 0, false, false, false
			}
			fo := binary.BigEndian.Uint16(ip[off+2:])
			later, frag = fo>>3 != 0, true
			nh, off = ip[off], off+8
		default:
			return nh, off, later, frag, off <= len(ip)
		}
	}
}

// ipPayload is an IP packet's payload length by its header (IPv6: with
// its extension headers).
func ipPayload(p []byte) int {
	ip := ipHeader(p)
	if ip == nil {
		return 0
	}
	if ip[0]>>4 == 6 {
		return int(binary.BigEndian.Uint16(ip[4:]))
	}
	return int(binary.BigEndian.Uint16(ip[2:])) - int(ip[0]&15)*4
}

// tupleOf returns a frame's key and tuple; later says it is a later
// fragment (no ports: its datagram's tuple is its first fragment's).
func tupleOf(p []byte) (key uint32, tuple string, later, ok bool) {
	ip := ipHeader(p)
	if ip == nil {
		return 0, "", false, false
	}
	key, _ = keyOf(ip)
	var src, dst netip.Addr
	if ip[0]>>4 == 4 {
		src, dst = netip.AddrFrom4([4]byte(ip[12:16])), netip.AddrFrom4([4]byte(ip[16:20]))
	} else {
		src, dst = netip.AddrFrom16([16]byte(ip[8:24])), netip.AddrFrom16([16]byte(ip[24:40]))
	}
	proto, off, later, _, hok := l4Of(ip)
	var sp, dp uint16
	if hok && !later && len(ip) >= off+8 {
		switch proto {
		case 6, 17:
			sp, dp = binary.BigEndian.Uint16(ip[off:]), binary.BigEndian.Uint16(ip[off+2:])
		case 1, 58:
			sp = binary.BigEndian.Uint16(ip[off+4:])
		}
	}
	return key, fmt.Sprintf("%v:%d > %v:%d", src, sp, dst, dp), later, true
}

func sum16(b []byte, s uint32) uint32 {
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	return s
}

func fold16(s uint32) uint16 {
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return uint16(s)
}

// checksumErr verifies an IP packet's header (IPv4) and L4 checksums (not
// for fragments' L4, which covers the whole datagram).
func checksumErr(p []byte) string {
	ip := ipHeader(p)
	if ip == nil {
		return ""
	}
	v6 := ip[0]>>4 == 6
	var tot int
	if v6 {
		tot = 40 + int(binary.BigEndian.Uint16(ip[4:]))
	} else {
		tot = int(binary.BigEndian.Uint16(ip[2:]))
	}
	if tot > len(ip) {
		return "truncated"
	}
	if !v6 && fold16(sum16(ip[:int(ip[0]&15)*4], 0)) != 0xffff {
		return "bad IP header checksum"
	}
	proto, off, _, frag, ok := l4Of(ip[:tot])
	if !ok || frag {
		return ""
	}
	seg := ip[off:tot]
	var pseudo uint32
	if v6 {
		pseudo = sum16(ip[8:40], uint32(proto)+uint32(len(seg)))
	} else {
		pseudo = sum16(ip[12:20], uint32(proto)+uint32(len(seg)))
	}
	switch proto {
	case 6, 17:
		if len(seg) < 8 || proto == 17 && !v6 && binary.BigEndian.Uint16(seg[6:]) == 0 {
			return ""
		}
		if fold16(sum16(seg, pseudo)) != 0xffff {
			return fmt.Sprintf("bad L4 checksum (proto %d)", proto)
		}
	case 1:
		if fold16(sum16(seg, 0)) != 0xffff {
			return "bad ICMP checksum"
		}
	case 58:
		if fold16(sum16(seg, pseudo)) != 0xffff {
			return "bad ICMPv6 checksum"
		}
	}
	return ""
}

func readPcap(t *testing.T, path string) [][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var out [][]byte
	for {
		data, _, err := r.ReadPacketData()
		if err == io.EOF {
			return out
		}
		if err != nil {
			// tcpdump killed mid-record leaves a short last one.
			if errors.Is(err, io.ErrUnexpectedEOF) {
				return out
			}
			t.Fatalf("%s: record %d: %v", path, len(out)+1, err)
		}
		out = append(out, data)
	}
}

// nflogRecords reads an NFLOG capture (LINKTYPE_NFLOG): per record, the
// prefix (TLV 10) and the packet's key (from the payload, TLV 9).
func nflogRecords(t *testing.T, path string) map[uint32][]string {
	t.Helper()
	out := map[uint32][]string{}
	for _, rec := range readPcap(t, path) {
		if len(rec) < 4 {
			continue
		}
		var prefix string
		var payload []byte
		for b := rec[4:]; len(b) >= 4; {
			l, typ := int(binary.LittleEndian.Uint16(b)), binary.LittleEndian.Uint16(b[2:])
			if l < 4 || l > len(b) {
				break
			}
			v := b[4:l]
			switch typ {
			case 10:
				prefix = strings.TrimRight(string(v), "\x00")
			case 9:
				payload = v
			}
			b = b[(l+3)&^3:]
		}
		if key, ok := keyOf(payload); ok {
			out[key] = append(out[key], prefix)
		}
	}
	return out
}

// memSink records what Warpflow transmitted on one port.
type memSink struct {
	name string
	mu   sync.Mutex
	pkts [][]byte
}

func (s *memSink) Name() string                      { return s.name }
func (s *memSink) Receive(*rings.Batch) (int, error) { return 0, dataplane.ErrNotReceiver }
func (s *memSink) Recycle([]rings.Desc)              {}
func (s *memSink) Close() error                      { return nil }
func (s *memSink) Transmit(a *rings.Arena, descs []rings.Desc) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range descs {
		s.pkts = append(s.pkts, append([]byte(nil), a.Bytes(d)...))
	}
	return len(descs), nil
}

// warpflow runs the capture through pipelineYAML (the in-process replay,
// what warpctl replay does) and returns each packet's outcome by IP id,
// and the TCP flows' states at the end.
func warpflow(t *testing.T, capture []byte) (map[uint32]*outcome, map[string]string) {
	t.Helper()
	g, err := pipelines.Load("oracle.yaml", []byte(pipelineYAML))
	if err != nil {
		t.Fatal(err)
	}
	arena, err := rings.NewArena(rings.ArenaOptions{Frames: 1024, FrameSize: 4096, Headroom: 256})
	if err != nil {
		t.Fatal(err)
	}
	rp, err := dataplane.NewReplay("conv.pcap", bytes.NewReader(capture), arena, dataplane.DefaultReplayOptions())
	if err != nil {
		t.Fatal(err)
	}
	outs := dataplane.Outputs{Ports: map[string]dataplane.Port{}}
	sinks := map[string]*memSink{}
	for _, p := range classPorts {
		sinks[p] = &memSink{name: p}
		outs.Ports[p] = sinks[p]
	}
	o := dataplane.DefaultOptions()
	o.Workers = 0
	e, err := dataplane.NewEngine(g, arena, rp, outs, o)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Run(nil); err != nil {
		t.Fatal(err)
	}
	res := map[uint32]*outcome{}
	for class, s := range sinks {
		for _, p := range s.pkts {
			id, tuple, later, ok := tupleOf(p)
			if !ok {
				continue
			}
			o := res[id]
			if o == nil {
				o = &outcome{}
				res[id] = o
			}
			o.class, o.count, o.payload = class, o.count+1, o.payload+ipPayload(p)
			if class == "inv" {
				o.dropped = true // Linux drops what it finds invalid
				continue
			}
			if !later || o.tuple == "" {
				o.tuple = tuple
			}
			if ck := checksumErr(p); ck != "" {
				o.ckErr = ck
			}
		}
	}
	fl, err := e.Flows(context.Background(), dataplane.FlowQuery{Filter: pipelines.FlowFilter{Proto: 6}, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	states := map[string]string{}
	for _, f := range fl.Flows {
		states[fmt.Sprintf("%v:%d>%v:%d", f.Src, f.SrcPort, f.Dst, f.DstPort)] = f.State
	}
	return res, states
}

// linux sends the capture through the router and returns each packet's
// outcome by IP id, and the router's TCP flows' states.
func linux(t *testing.T, capture []byte) (map[uint32]*outcome, map[string]string) {
	t.Helper()
	r, tr := topology(t)
	dir := t.TempDir()
	in := filepath.Join(dir, "in.pcap")
	if err := os.WriteFile(in, capture, 0o644); err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(dir, "in.cache")
	sh(t, "", "tcpprep", "-c", "10.0.0.0/8,"+clients6, "-i", in, "-o", cache)
	logRec := record(t, r, "nflog:1", filepath.Join(dir, "nflog.pcap"))
	// Both ways on a0 and b0; what the router sent is the frames to their
	// own MACs (tcpreplay's go to the router's).
	aRec := record(t, tr, "a0", filepath.Join(dir, "a.pcap"))
	bRec := record(t, tr, "b0", filepath.Join(dir, "b.pcap"))
	sh(t, tr, "tcpreplay", "-q", "--pps=1000", "-c", cache, "-i", "a0", "-I", "b0", in)
	time.Sleep(300 * time.Millisecond) // the last packets' way through the router

	for _, rec := range []*recorder{logRec, aRec, bRec} {
		rec.stop(t)
	}
	res := map[uint32]*outcome{}
	for id, prefixes := range nflogRecords(t, logRec.file) {
		res[id] = &outcome{class: prefixes[0], dropped: prefixes[0] == "inv" || prefixes[0] == "blk"}
	}
	for _, c := range []struct{ file, mac string }{{aRec.file, macA0}, {bRec.file, macB0}} {
		mac, _ := net.ParseMAC(c.mac)
		all := readPcap(t, c.file)
		for _, p := range all {
			if len(p) < 14 || !bytes.Equal(p[:6], mac) {
				continue // one tcpreplay sent
			}
			id, tuple, later, ok := tupleOf(p)
			if !ok {
				continue
			}
			o := res[id]
			if o == nil {
				o = &outcome{} // forwarded but not logged (see explained)
				res[id] = o
			}
			o.count, o.payload = o.count+1, o.payload+ipPayload(p)
			if !later || o.tuple == "" {
				o.tuple = tuple // a later fragment (no ports) does not replace its first's
			}
			if ck := checksumErr(p); ck != "" {
				o.ckErr = ck
			}
		}
	}
	states := map[string]string{}
	if _, err := exec.LookPath("conntrack"); err == nil {
		out := sh(t, r, "conntrack", "-L", "-f", "ipv4", "-p", "tcp") + sh(t, r, "conntrack", "-L", "-f", "ipv6", "-p", "tcp")
		for _, line := range strings.Split(out, "\n") {
			f := strings.Fields(line)
			// "ipv6 10 tcp 6 ..." with -f ipv6, "tcp 6 ..." for IPv4
			if len(f) > 2 && f[0] == "ipv6" {
				f = f[2:]
			}
			if len(f) < 8 || f[0] != "tcp" {
				continue
			}
			kv := map[string]string{}
			for _, x := range f[4:] {
				if k, v, ok := strings.Cut(x, "="); ok {
					if _, seen := kv[k]; !seen {
						kv[k] = v
					}
				}
			}
			states[fmt.Sprintf("%s:%s>%s:%s", kv["src"], kv["sport"], kv["dst"], kv["dport"])] = f[3]
		}
	}
	return res, states
}

// explained says why Warpflow may differ from Linux on a packet, or "".
// Each explanation checks that the difference is the one it explains.
func explained(k kind, lx, wf *outcome) string {
	const datagram = 1408 // the fragmented datagrams' UDP length
	switch k.frag {
	case "out-of-order":
		// Shallow reassembly cannot hold a later fragment until its first
		// arrives (a stage cannot keep a frame across batches): it drops
		// it as frag_no_first, and forwards the other two; Linux
		// reassembles first and forwards it all. Full mode would
		// reassemble. (The log rules flush every record at once,
		// queue-threshold 1: NFLOG's default batching held the last
		// records of a run back past the end of the capture.)
		if !lx.dropped && lx.payload == datagram && !wf.dropped && wf.class == "new_o" && wf.payload == datagram-400 {
			return "shallow reassembly drops a later fragment that comes before its first (frag_no_first); Linux reassembles"
		}
	case "overlap":
		// Linux drops a datagram with overlapping fragments whole (since
		// FragmentSmack); shallow reassembly has forwarded the first
		// fragment when the overlap shows, and drops the rest.
		if lx.dropped && lx.payload == 0 && wf.class == "new_o" && wf.payload == 504 {
			return "shallow reassembly forwards fragments before an overlap is seen; Linux drops the whole datagram"
		}
	case "in-order":
		// Linux logs the reassembled datagram once and refragments it on
		// output; Warpflow forwards each fragment with the datagram's
		// class. Same verdict and class; the count of packets may differ.
		if lx.class == wf.class && lx.dropped == wf.dropped {
			return "Linux defragments, logs once and refragments; Warpflow forwards each fragment, same class"
		}
	}
	return ""
}

// TestNetfilterOracle sends the same conversations, IPv4 and IPv6,
// through Linux's conntrack and NAT and through Warpflow's, and compares
// each packet's verdict, ct state and direction, and translation
// (addresses and ports), and the TCP flows' states at the end. Every
// output checksum must be valid. Each difference must be explained
// (explained above) or the test fails.
func TestNetfilterOracle(t *testing.T) {
	requireTools(t)
	pkts, kinds := conversations()
	classes, v6 := compareRouters(t, pkts, kinds, explained)
	for _, want := range []string{"new_o", "est_o", "est_r", "rel_r", "inv", "blk", "untr"} {
		if classes[want] == 0 {
			t.Errorf("the conversations never produced class %s: the test is weaker than it says", want)
		}
	}
	for _, want := range []string{"new_o", "est_o", "est_r", "rel_r", "inv", "untr"} {
		if v6[want] == 0 {
			t.Errorf("the IPv6 conversations never produced class %s: the test is weaker than it says", want)
		}
	}
}

// compareRouters sends pkts through both routers and fails the test on
// every difference that why does not explain. It returns the classes
// Warpflow gave, all and IPv6 only.
func compareRouters(t *testing.T, pkts []convgen.Packet, kinds map[uint32]kind, why func(kind, *outcome, *outcome) string) (classes, v6 map[string]int) {
	t.Helper()
	capture := convgen.Pcap(pkts, time.Unix(1700000000, 0))
	wf, wfStates := warpflow(t, capture)
	lx, lxStates := linux(t, capture)

	keys := make([]uint32, 0, len(kinds))
	for k := range kinds {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	var diffs, explainedDiffs []string
	classes, v6 = map[string]int{}, map[string]int{}
	for _, id := range keys {
		k := kinds[id]
		l, w := lx[id], wf[id]
		if l == nil {
			l = &outcome{dropped: true, class: "(none: dropped before the forward chain)"}
		}
		if w == nil {
			// Not transmitted: dropped by a drop edge (drop:blk, or one
			// of reassemble's), which the test cannot tell apart.
			w = &outcome{dropped: true, class: "drop"}
			if l.class == "blk" {
				w.class = "blk"
			}
		}
		classes[w.class]++
		if id&v6Key != 0 {
			v6[w.class]++
		}
		for _, o := range []*outcome{l, w} {
			if o.ckErr != "" {
				diffs = append(diffs, fmt.Sprintf("packet %#x (%s): an output checksum is wrong: %s", id, k.conv, o.ckErr))
			}
		}
		same := l.class == w.class && l.dropped == w.dropped && (l.dropped || l.tuple == w.tuple && l.payload == w.payload)
		if same {
			continue
		}
		d := fmt.Sprintf("packet %#x (%s #%d %s): linux %s dropped=%v %q %d B, warpflow %s dropped=%v %q %d B",
			id, k.conv, k.index, k.frag, l.class, l.dropped, l.tuple, l.payload, w.class, w.dropped, w.tuple, w.payload)
		if why := why(k, l, w); why != "" {
			explainedDiffs = append(explainedDiffs, d+": "+why)
			continue
		}
		diffs = append(diffs, d)
	}
	gone := map[string]string{} // flows Warpflow dropped by design (kind.noFlow), by conntrack key
	for _, k := range kinds {
		if k.noFlow {
			gone[strings.ReplaceAll(k.in, " > ", ">")] = k.conv
		}
	}
	for key, ls := range lxStates {
		if ws, ok := wfStates[key]; !ok || ws != ls {
			if conv, ok := gone[key]; ok && ws == "" {
				t.Logf("explained: flow %s: linux %s, warpflow none: its packets were dropped by design (%s)", key, ls, conv)
				continue
			}
			diffs = append(diffs, fmt.Sprintf("flow %s: linux %s, warpflow %q", key, ls, ws))
		}
	}
	for key, ws := range wfStates {
		if _, ok := lxStates[key]; !ok && len(lxStates) > 0 {
			diffs = append(diffs, fmt.Sprintf("flow %s: warpflow %s, linux has none", key, ws))
		}
	}
	for _, d := range explainedDiffs {
		t.Logf("explained: %s", d)
	}
	t.Logf("%d packets compared; Warpflow's classes %v (IPv6 %v); %d TCP flows in both tables", len(keys), classes, v6, len(lxStates))
	if len(lxStates) == 0 && os.Getenv("CI") == "true" {
		t.Error("no TCP flows read from the router (conntrack -L): install conntrack")
	}
	if len(diffs) > 0 {
		t.Fatalf("%d unexplained differences from Linux netfilter:\n%s", len(diffs), strings.Join(diffs, "\n"))
	}
	return classes, v6
}
