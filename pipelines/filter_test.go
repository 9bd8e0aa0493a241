package pipelines

import (
	"math/rand/v2"
	"net/netip"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/warpflow/warpflow/internal/allocs"
	"github.com/warpflow/warpflow/rings"
	"go.yaml.in/yaml/v3"
)

// buildFilterYAML builds a filter stage from one stage's YAML mapping, as
// the compiler would with the stage followed by one named "next" (or last
// in the list when hasNext is false).
func buildFilterYAML(t testing.TB, src string, hasNext bool) (Template, *ErrorList) {
	t.Helper()
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(src), &doc); err != nil {
		t.Fatalf("bad test yaml: %v", err)
	}
	c := &BuildContext{
		Name: "acl", Kind: "filter", File: "f.yaml", Node: doc.Content[0],
		next: Target{Stage: "next"}, hasNxt: hasNext,
		errs: &ErrorList{}, common: []string{"name", "type", "next"},
	}
	tpl := filterKind.Build(c)
	if c.errs.Len() > 0 && tpl != nil {
		t.Errorf("build returned a template despite errors: %v", c.errs)
	}
	return tpl, c.errs
}

// metaV4 returns a parsed IPv4 TCP/UDP-style packet's Meta.
func metaV4(proto uint8, src, dst string, sport, dport uint16) rings.Meta {
	m := rings.Meta{Class: rings.ClassOK, Flags: rings.FlagIPv4 | rings.FlagL4, IPProto: proto, SrcPort: sport, DstPort: dport}
	s, d := netip.MustParseAddr(src).As4(), netip.MustParseAddr(dst).As4()
	copy(m.SrcIP[:], s[:])
	copy(m.DstIP[:], d[:])
	return m
}

func metaV6(proto uint8, src, dst string, sport, dport uint16) rings.Meta {
	m := rings.Meta{Class: rings.ClassOK, Flags: rings.FlagIPv6 | rings.FlagL4, IPProto: proto, SrcPort: sport, DstPort: dport}
	m.SrcIP, m.DstIP = netip.MustParseAddr(src).As16(), netip.MustParseAddr(dst).As16()
	return m
}

func with(m rings.Meta, f func(*rings.Meta)) rings.Meta { f(&m); return m }

// runFilter runs one packet through tpl and returns where it went.
func runFilter(t testing.TB, tpl Template, m rings.Meta) string {
	t.Helper()
	a, err := rings.NewArena(rings.ArenaOptions{Frames: 4, FrameSize: 2048})
	if err != nil {
		t.Fatal(err)
	}
	b := rings.NewBatch(1, a)
	b.SetLen(1)
	b.Meta[0] = m
	next := []Edge{255}
	tpl.NewInstance().Process(b, []uint16{0}, next)
	return tpl.Edges()[next[0]].String()
}

func TestFilterFields(t *testing.T) {
	tcp := metaV4(6, "10.1.2.3", "192.0.2.80", 40000, 80)
	udp := metaV4(17, "10.1.2.3", "192.0.2.80", 5353, 53)
	tcp6 := metaV6(6, "2001:db8::1", "2001:db8:1::2", 40000, 443)
	arp := rings.Meta{Class: rings.ClassOK, Flags: rings.FlagARP}
	icmp := metaV4(1, "10.1.2.3", "192.0.2.80", 0x0800, 80)
	mapped := metaV6(6, "::ffff:10.1.2.3", "::1", 1, 2)
	tagged := func(ids ...uint16) rings.Meta {
		return with(tcp, func(m *rings.Meta) { m.NumVLANs = uint8(len(ids)); copy(m.VLANs[:], ids) })
	}
	flags := func(f uint8) rings.Meta { return with(tcp, func(m *rings.Meta) { m.TCPFlags = f }) }
	class := func(c rings.Class) rings.Meta { return with(tcp, func(m *rings.Meta) { m.Class = c }) }
	frag := with(udp, func(m *rings.Meta) { m.Flags = rings.FlagIPv4 | rings.FlagFragment })

	tests := []struct {
		name string
		rule string // one rule's fields, without action
		m    rings.Meta
		hit  bool
	}{
		{"empty rule matches all", "{}", arp, true},
		{"proto tcp", "{proto: tcp}", tcp, true},
		{"proto tcp on v6", "{proto: tcp}", tcp6, true},
		{"proto tcp not udp", "{proto: tcp}", udp, false},
		{"proto tcp not arp", "{proto: tcp}", arp, false},
		{"proto number", "{proto: 17}", udp, true},
		{"proto list", "{proto: [icmp, udp]}", udp, true},
		{"proto ipv4", "{proto: ipv4}", udp, true},
		{"proto ipv4 not v6", "{proto: ipv4}", tcp6, false},
		{"proto ipv6", "{proto: ipv6}", tcp6, true},
		{"proto arp", "{proto: arp}", arp, true},
		{"proto arp not ip", "{proto: arp}", tcp, false},
		{"proto 0 not arp", "{proto: 0}", arp, false},
		{"src cidr", "{src: 10.0.0.0/8}", tcp, true},
		{"src cidr miss", "{src: 10.2.0.0/16}", tcp, false},
		{"src host", "{src: 10.1.2.3}", tcp, true},
		{"src host miss", "{src: 10.1.2.4}", tcp, false},
		{"src list", "{src: [192.0.2.0/24, 10.1.2.0/30]}", tcp, true},
		{"src v4 never v6", "{src: 0.0.0.0/0}", tcp6, false},
		{"src v4 never v4-mapped v6", "{src: 10.0.0.0/8}", mapped, false},
		{"src v6 never v4", "{src: '::/0'}", tcp, false},
		{"src v6 cidr", "{src: 2001:db8::/32}", tcp6, true},
		{"src v6 long", "{src: 2001:db8::0/127}", tcp6, true},
		{"src v6 long miss", "{src: 2001:db8::2/127}", tcp6, false},
		{"src mixed list", "{src: [10.9.0.0/16, 2001:db8::1]}", tcp6, true},
		{"src mixed list v4 part", "{src: [10.1.0.0/16, 2001:db8::9]}", tcp, true},
		{"src mixed list miss", "{src: [10.1.0.0/16, 2001:db8::9]}", tcp6, false},
		{"src not arp", "{src: 0.0.0.0/0}", arp, false},
		{"dst cidr", "{dst: 192.0.2.64/26}", tcp, true},
		{"dst cidr miss", "{dst: 192.0.2.0/26}", tcp, false},
		{"dst v6", "{dst: 2001:db8:1::/48}", tcp6, true},
		{"dst_port", "{dst_port: 80}", tcp, true},
		{"dst_port miss", "{dst_port: 81}", tcp, false},
		{"dst_port range low end", "{dst_port: 80-90}", tcp, true},
		{"dst_port range high end", "{dst_port: 70-80}", tcp, true},
		{"dst_port range miss", "{dst_port: 81-90}", tcp, false},
		{"dst_port list", "{dst_port: [22, 53]}", udp, true},
		{"src_port range", "{src_port: 1024-65535}", tcp, true},
		{"src_port miss", "{src_port: 0-1023}", tcp, false},
		{"port not icmp", "{dst_port: 80}", icmp, false},
		{"port not fragment", "{dst_port: 53}", frag, false},
		{"vlan", "{vlan: 10}", tagged(10), true},
		{"vlan outer only", "{vlan: 20}", tagged(10, 20), false},
		{"vlan qinq outer", "{vlan: 10}", tagged(10, 20), true},
		{"vlan ignores pcp", "{vlan: 10}", tagged(0xe00a), true},
		{"vlan range", "{vlan: 5-15}", tagged(10), true},
		{"vlan not untagged", "{vlan: 0-4095}", tcp, false},
		{"vlan none", "{vlan: none}", tcp, true},
		{"vlan none not tagged", "{vlan: none}", tagged(0), false},
		{"vlan list with none", "{vlan: [none, 7]}", tagged(7), true},
		{"tcp syn", "{tcp_flags: syn}", flags(0x02), true},
		{"tcp syn,!ack", "{tcp_flags: 'syn,!ack'}", flags(0x02), true},
		{"tcp syn,!ack on syn-ack", "{tcp_flags: 'syn,!ack'}", flags(0x12), false},
		{"tcp flags list", "{tcp_flags: [fin, '!rst']}", flags(0x11), true},
		{"tcp cwr ece", "{tcp_flags: 'cwr,ece,!urg'}", flags(0xc0), true},
		{"tcp flags not udp", "{tcp_flags: '!syn'}", udp, false},
		{"class", "{class: truncated}", class(rings.ClassTruncated), true},
		{"class miss", "{class: truncated}", tcp, false},
		{"class list", "{class: [ok, truncated]}", tcp, true},
		{"class malformed", "{class: malformed}", class(rings.ClassBadVersion), true},
		{"class malformed not ok", "{class: malformed}", tcp, false},
		{"class malformed not unknown_l3", "{class: malformed}", class(rings.ClassUnknownL3), false},
		{"fragment true", "{fragment: true}", frag, true},
		{"fragment true miss", "{fragment: true}", udp, false},
		{"fragment false", "{fragment: false}", udp, true},
		{"all fields", "{proto: tcp, src: 10.0.0.0/8, dst: 192.0.2.80, src_port: 40000, dst_port: 80-81, vlan: none, tcp_flags: '!rst', class: ok, fragment: false}", tcp, true},
		{"all fields one off", "{proto: tcp, src: 10.0.0.0/8, dst: 192.0.2.80, src_port: 40000, dst_port: 80-81, vlan: none, tcp_flags: 'rst', class: ok, fragment: false}", flags(0), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rule := strings.TrimSuffix(tc.rule, "}")
			if rule != "{" {
				rule += ", "
			}
			src := "{type: filter, default: 'drop:nomatch', rules: [" + rule + "action: hit}]}"
			tpl, errs := buildFilterYAML(t, src, true)
			if errs.Len() > 0 {
				t.Fatalf("build: %v", errs)
			}
			want := "drop:nomatch"
			if tc.hit {
				want = "hit"
			}
			if got := runFilter(t, tpl, tc.m); got != want {
				t.Fatalf("packet went to %s, want %s", got, want)
			}
			// The oracle must agree with the hand-written expectation too.
			ft := tpl.(*filterTemplate)
			if got := ft.edges[ft.ruleEdge[oracleMatch(parseRulesForTest(t, src), &tc.m)]].String(); got != want {
				t.Fatalf("oracle sends the packet to %s, want %s", got, want)
			}
		})
	}
}

// parseRulesForTest parses the rules of a filter stage's YAML.
func parseRulesForTest(t testing.TB, src string) []filterRule {
	t.Helper()
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(src), &doc); err != nil {
		t.Fatal(err)
	}
	c := &BuildContext{File: "f.yaml", errs: &ErrorList{}}
	var rules []filterRule
	for _, n := range mappingValue(doc.Content[0], "rules").Content {
		r, ok := parseFilterRule(c, n)
		if !ok {
			t.Fatalf("parse rule: %v", c.errs)
		}
		rules = append(rules, r)
	}
	return rules
}

func TestFilterFirstMatchAndEdges(t *testing.T) {
	src := `
type: filter
default: "drop:nomatch"
rules:
  - {proto: tcp, dst_port: 23, action: "drop:telnet"}
  - {src: 10.0.0.0/8, action: accept}
  - {proto: tcp, action: other}
  - {proto: udp, action: "drop:telnet"}
  - {proto: icmp, action: next}
  - {proto: sctp, action: other}
`
	tpl, errs := buildFilterYAML(t, src, true)
	if errs.Len() > 0 {
		t.Fatal(errs)
	}
	var got []string
	for _, e := range tpl.Edges() {
		got = append(got, e.String())
	}
	if want := "next drop:nomatch drop:telnet other"; strings.Join(got, " ") != want {
		t.Fatalf("edges %q, want %q", strings.Join(got, " "), want)
	}
	for _, tc := range []struct {
		m    rings.Meta
		want string
	}{
		{metaV4(6, "10.0.0.1", "1.1.1.1", 1, 23), "drop:telnet"}, // rule 0 before rule 1
		{metaV4(6, "10.0.0.1", "1.1.1.1", 1, 22), "next"},        // rule 1
		{metaV4(6, "11.0.0.1", "1.1.1.1", 1, 22), "other"},       // rule 2
		{metaV4(17, "11.0.0.1", "1.1.1.1", 1, 22), "drop:telnet"},
		{metaV4(1, "11.0.0.1", "1.1.1.1", 1, 22), "next"},
		{metaV4(47, "11.0.0.1", "1.1.1.1", 1, 22), "drop:nomatch"},
	} {
		if got := runFilter(t, tpl, tc.m); got != tc.want {
			t.Errorf("%v: went to %s, want %s", tc.m.DstPort, got, tc.want)
		}
	}
	// Default accept and no rules: one edge, everything to next.
	tpl, errs = buildFilterYAML(t, "{type: filter}", true)
	if errs.Len() > 0 || len(tpl.Edges()) != 1 || runFilter(t, tpl, rings.Meta{}) != "next" {
		t.Fatalf("empty filter: %v %v", errs, tpl)
	}
	// As the last stage it cannot build; the compiler reports the missing
	// next edge.
	if tpl, errs = buildFilterYAML(t, "{type: filter}", false); tpl != nil || errs.Len() != 0 {
		t.Fatalf("last-stage filter: template %v, errors %v", tpl, errs)
	}
}

func TestFilterBuildErrors(t *testing.T) {
	tests := []struct {
		rules string // the rules list, starting on line 3
		want  string
		line  int
	}{
		{"  - {src: 10.0.0.0/33, action: accept}", `src "10.0.0.0/33"`, 3},
		{"  - {dst: 10.0.0.300, action: accept}", `dst "10.0.0.300"`, 3},
		{"  - {dst: fe80::1%eth0, action: accept}", `dst "fe80::1%eth0"`, 3},
		{"  - {dst_port: 70000, action: accept}", "out of range 0-65535", 3},
		{"  - {src_port: 2000-1000, action: accept}", "low end is above", 3},
		{"  - {dst_port: http, action: accept}", "want a number", 3},
		{"  - {proto: tcpp, action: accept}", `proto "tcpp"`, 3},
		{"  - {proto: 256, action: accept}", `proto "256"`, 3},
		{"  - {tcp_flags: 'syn,fyn', action: accept}", `unknown flag "fyn"`, 3},
		{"  - {tcp_flags: 'syn,!syn', action: accept}", "both set and clear", 3},
		{"  - {class: weird, action: accept}", `class "weird"`, 3},
		{"  - {vlan: 4096, action: accept}", "out of range 0-4095", 3},
		{"  - {vlan: [1, 5000], action: accept}", `vlan "5000"`, 3},
		{"  - {fragment: maybe, action: accept}", "want true or false", 3},
		{"  - {proto: tcp}", "missing action", 3},
		{"  - {proto: tcp, action: ''}", "missing action", 3},
		{"  - {proto: tcp, action: 'drop:'}", "drop reason", 3},
		{"  - {proto: tcp, action: drop}", "want drop:<reason>", 3},
		{"  - {proto: tcp, action: 'bad name'}", "edge target", 3},
		{"  - {dport: 80, action: accept}", `unknown option "dport"`, 3},
		{"  - {src: [], action: accept}", "empty list", 3},
		{"  - {src: {a: b}, action: accept}", "want a value or a list", 3},
		{"  - accept", "want a mapping", 3},
		{"  - {action: accept}\n  - {proto: udp, action: accept}\n  - {dst_port: 99999, action: accept}", "out of range", 5},
	}
	for _, tc := range tests {
		t.Run(tc.want, func(t *testing.T) {
			src := "type: filter\nrules:\n" + tc.rules + "\n"
			tpl, errs := buildFilterYAML(t, src, true)
			if tpl != nil || errs.Len() == 0 {
				t.Fatalf("want an error containing %q, got none", tc.want)
			}
			e := errs.Errs[0]
			if !strings.Contains(e.Error(), tc.want) || e.Pos.Line != tc.line || e.Pos.File != "f.yaml" || e.Stage != "acl" {
				t.Fatalf("error %q at %v: want %q at line %d", e.Error(), e.Pos, tc.want, tc.line)
			}
		})
	}
	for _, tc := range []struct{ src, want string }{
		{"type: filter\nrulez: []\n", `unknown option "rulez"`},
		{"type: filter\nrules: {a: 1}\n", "want a list of rules"},
		{"type: filter\ndefault: 'drop:a b'\n", "drop reason"},
		{"type: filter\ndefault: [accept]\n", "want accept"},
	} {
		if tpl, errs := buildFilterYAML(t, tc.src, true); tpl != nil || !strings.Contains(errs.Error(), tc.want) || errs.Errs[0].Pos.Line != 2 {
			t.Errorf("%q: got %v, want an error on line 2 containing %q", tc.src, errs, tc.want)
		}
	}
	// Every bad rule is reported, not only the first.
	_, errs := buildFilterYAML(t, "type: filter\nrules:\n  - {proto: x, action: accept}\n  - {vlan: 9999}\n", true)
	if errs.Len() != 3 {
		t.Errorf("want 3 errors (proto, vlan, action), got %v", errs)
	}
}

func TestFilterTooManyActions(t *testing.T) {
	var sb strings.Builder
	sb.WriteString("type: filter\nrules:\n")
	for i := range MaxEdges + 1 {
		sb.WriteString("  - {dst_port: 1, action: 'drop:r" + string(rune('a'+i%26)) + strings.Repeat("x", i/26) + "'}\n")
	}
	tpl, errs := buildFilterYAML(t, sb.String(), true)
	if tpl != nil || !strings.Contains(errs.Error(), "too many distinct filter actions") {
		t.Fatalf("want a too-many-actions error, got %v", errs)
	}
}

func TestFilterCountersAndAllocs(t *testing.T) {
	rnd := rand.New(rand.NewPCG(3, 3))
	rules := realisticRules(rnd, 1000)
	tpl, bad := newFilterTemplate(rules, Target{Drop: "nomatch"}, Target{Stage: "next"})
	if bad != nil {
		t.Fatal(bad)
	}
	st := tpl.NewInstance()
	a, err := rings.NewArena(rings.ArenaOptions{Frames: 64, FrameSize: 2048})
	if err != nil {
		t.Fatal(err)
	}
	b := rings.NewBatch(64, a)
	b.SetLen(64)
	copy(b.Meta, realisticMetas(rnd, rules, 64))
	idx := make([]uint16, 0, 64)
	for i := range 64 {
		b.Descs[i].Len = uint32(60 + i)
		if i%3 != 0 { // a sparse index vector, as the graph hands over
			idx = append(idx, uint16(i))
		}
	}
	next := make([]Edge, len(idx))
	st.Process(b, idx, next)
	wantPkts := map[string]uint64{}
	wantBytes := map[string]uint64{}
	for k, i := range idx {
		r := oracleMatch(rules, &b.Meta[i])
		if next[k] != tpl.ruleEdge[r] {
			t.Fatalf("packet %d: edge %d, want %d (rule %d)", i, next[k], tpl.ruleEdge[r], r)
		}
		key := "rule=" + strconv.Itoa(int(r))
		if int(r) == len(rules) {
			key = "rule=default"
		}
		wantPkts[key]++
		wantBytes[key] += uint64(b.Descs[i].Len)
	}
	got := stReport(st)
	if len(got) != len(wantPkts) {
		t.Fatalf("report has %d counters, want %d: %+v", len(got), len(wantPkts), got)
	}
	for _, c := range got {
		if c.Packets != wantPkts[c.Key] || c.Bytes != wantBytes[c.Key] {
			t.Errorf("counter %s = %d/%d, want %d/%d", c.Key, c.Packets, c.Bytes, wantPkts[c.Key], wantBytes[c.Key])
		}
	}
	if wantPkts["rule=default"] == 0 {
		t.Errorf("test batch never took the default")
	}
	if n := allocs.Count(100, func() { st.Process(b, idx, next) }); n != 0 {
		t.Fatalf("Process allocated %d times in 100 batches, want 0", n)
	}
}

// TestFilterRuleKeys: the rule decoder's key table matches
// filterRuleYAML, every key is taken where it lies, a repeated key is an
// error naming where it first was, and an empty value is an error (not
// "any").
func TestFilterRuleKeys(t *testing.T) {
	if n := reflect.TypeOf(filterRuleYAML{}).NumField(); n != filterRuleKeys || len(filterRuleField) != n {
		t.Fatalf("filterRuleYAML has %d fields, filterRuleKeys %d, the key table %d", n, filterRuleKeys, len(filterRuleField))
	}
	for key := range filterRuleField {
		_, errs := buildFilterYAML(t, "rules:\n  - {"+key+": x,\n     "+key+": y}\n", true)
		if !strings.Contains(errs.Error(), `f.yaml:3:6: stage "acl": duplicate key "`+key+`" (first at line 2)`) {
			t.Errorf("%s twice: %v", key, errs)
		}
	}
	for _, v := range []string{"~", "", "null"} {
		if _, errs := buildFilterYAML(t, "rules:\n  - {src: "+v+", action: drop}\n", true); errs.Len() == 0 {
			t.Errorf("src: %q accepted", v)
		}
	}
	_, errs := buildFilterYAML(t, "rules:\n  - {proto: tcp, port: 80, action: drop}\n", true)
	if !strings.Contains(errs.Error(), `unknown option "port" (known: action, class, ct, ct_dir, dst, dst_port, fragment, proto, src, src_port, tcp_flags, vlan)`) {
		t.Errorf("unknown key: %v", errs)
	}
}
