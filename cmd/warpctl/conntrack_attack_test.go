package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/warpflow/warpflow/internal/control"
)

// TestConntrackTableEndpoints: the table's ORIGINAL and REPLY columns
// must read unambiguously for every kind of flow the JSON carries. An
// IPv6 address and a port were joined with a bare colon
// ("2001:db8::1:443", which is also an address), an ICMP flow showed its
// identifier and type<<8|code as ports ("10.0.0.1:7 > 10.0.0.2:2048"),
// and a protocol without ports showed ":0". (The JSON keeps the table's
// encoding: for ICMP, sport is the identifier and dport type<<8|code in
// the original direction, the other way round in the reply.)
func TestConntrackTableEndpoints(t *testing.T) {
	rep := control.ConntrackReply{Pipeline: "p", Stage: "ct", Queues: 1, Entries: 4, Matched: 4, Flows: []control.ConntrackFlow{
		{Queue: "dp0", Proto: 6, ProtoName: "tcp", State: "ESTABLISHED", Src: "2001:db8::1", SrcPort: 40000, Dst: "2001:db8::2", DstPort: 443,
			ReplySrc: "2001:db8::2", ReplySrcPort: 443, ReplyDst: "2001:db8::1", ReplyDstPort: 40000, Replied: true, Assured: true},
		{Queue: "dp0", Proto: 1, ProtoName: "icmp", Src: "10.0.0.1", SrcPort: 7, Dst: "10.0.0.2", DstPort: 8 << 8,
			ReplySrc: "10.0.0.2", ReplySrcPort: 8 << 8, ReplyDst: "10.0.0.1", ReplyDstPort: 7, Replied: true},
		{Queue: "dp0", Proto: 58, ProtoName: "icmpv6", Src: "2001:db8::1", SrcPort: 9, Dst: "2001:db8::2", DstPort: 128 << 8,
			ReplySrc: "2001:db8::2", ReplySrcPort: 128 << 8, ReplyDst: "2001:db8::1", ReplyDstPort: 9},
		{Queue: "dp0", Proto: 47, ProtoName: "gre", Src: "10.0.0.1", Dst: "10.0.0.2", ReplySrc: "10.0.0.2", ReplyDst: "10.0.0.1"},
		{Queue: "dp0", Proto: 17, ProtoName: "udp", Src: "10.0.0.1", SrcPort: 4000, Dst: "198.51.100.9", DstPort: 53,
			ReplySrc: "198.51.100.9", ReplySrcPort: 53, ReplyDst: "192.0.2.1", ReplyDstPort: 4000, SNAT: true},
	}}
	var b bytes.Buffer
	printConntrack(&b, rep, true)
	out := b.String()
	t.Log("\n" + out)
	for _, want := range []string{
		"[2001:db8::1]:40000 > [2001:db8::2]:443", "[2001:db8::2]:443 > [2001:db8::1]:40000",
		"10.0.0.1 > 10.0.0.2 type=8 code=0 id=7", "10.0.0.2 > 10.0.0.1 type=0 code=0 id=7",
		"2001:db8::1 > 2001:db8::2 type=128 code=0 id=9", "2001:db8::2 > 2001:db8::1 type=129 code=0 id=9",
		"10.0.0.1:4000 > 198.51.100.9:53", "198.51.100.9:53 > 192.0.2.1:4000",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	for _, bad := range []string{"2001:db8::1:40000", ":2048", "10.0.0.1:0", "10.0.0.2:0"} {
		if strings.Contains(out, bad) {
			t.Errorf("table has %q:\n%s", bad, out)
		}
	}
}
