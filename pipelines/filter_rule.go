package pipelines

import (
	"net/netip"
	"reflect"
	"strconv"
	"strings"

	"github.com/warpflow/warpflow/rings"
	"go.yaml.in/yaml/v3"
)

// filterRule is one parsed filter rule: plain data, the input to both the
// compiled classifier and the tests' linear oracle. A nil list or a false
// has* field means the rule does not constrain that field.
type filterRule struct {
	proto    []uint16       // IP protocol numbers, or protoIPv4/protoIPv6/protoARP
	src, dst []netip.Prefix // masked prefixes, v4 or v6
	srcPort  []portRange
	dstPort  []portRange

	vlan     []portRange // outer VLAN ids
	vlanNone bool        // also match untagged packets
	hasVLAN  bool

	tcpSet, tcpClear uint8 // TCP flags that must be set / clear
	hasTCP           bool

	class    [4]uint64 // bit per rings.Class
	hasClass bool

	frag    bool // match fragments (true) or non-fragments (false)
	hasFrag bool

	// ctStates has bit s set for each rings.CT state (CTUntracked ..
	// CTInvalid) the rule matches; ctDirs bit 0 original, bit 1 reply.
	// Zero means unconstrained.
	ctStates uint8
	ctDirs   uint8

	action Target // where matching packets go; the zero Target is accept (the next edge)
}

// hasCT reports whether the rule matches on connection-tracking state.
func (r *filterRule) hasCT() bool { return r.ctStates != 0 || r.ctDirs != 0 }

// ctMatch reports whether a packet whose Meta.CT is v passes the rule's
// ct and ct_dir fields.
func (r *filterRule) ctMatch(v uint8) bool {
	if r.ctStates != 0 && r.ctStates&(1<<(v&rings.CTStateMask)) == 0 {
		return false
	}
	if r.ctDirs == 0 {
		return true
	}
	// Only a tracked packet has a direction (Linux's ct direction fails
	// on a packet without a conntrack entry).
	switch v & rings.CTStateMask {
	case rings.CTNew, rings.CTEstablished, rings.CTRelated:
	default:
		return false
	}
	dir := uint8(1)
	if v&rings.CTReply != 0 {
		dir = 2
	}
	return r.ctDirs&dir != 0
}

// portRange is an inclusive range of ports (or VLAN ids).
type portRange struct{ lo, hi uint16 }

// Pseudo protocol numbers for the L3-kind tokens of `proto:`.
const (
	protoIPv4 = 256 + iota
	protoIPv6
	protoARP
)

var protoNames = map[string]uint16{
	"icmp": 1, "igmp": 2, "tcp": 6, "udp": 17, "gre": 47, "esp": 50, "ah": 51,
	"icmpv6": 58, "sctp": 132,
	"ipv4": protoIPv4, "ipv6": protoIPv6, "arp": protoARP,
}

// tcpFlagBits are the TCP flag names in header bit order (FIN is bit 0).
var tcpFlagBits = [8]string{"fin", "syn", "rst", "psh", "ack", "urg", "ece", "cwr"}

// malformedClasses lists the classes "class: malformed" stands for: every
// class except the ones that say nothing is wrong with the packet.
func malformedClasses() [4]uint64 {
	var set [4]uint64
	for c := 0; c < rings.NumClasses; c++ {
		switch rings.Class(c) {
		case rings.ClassUnparsed, rings.ClassOK, rings.ClassUnknownL3:
			continue
		}
		set[c/64] |= 1 << (c % 64)
	}
	return set
}

// filterRuleYAML is a rule as written: every field points at its value's
// node in the config's tree (nil: the key is absent), so each value's
// error carries its own position, and nothing of the tree is copied (a
// 100,000-rule filter decoded into node values copied some 160 MB).
type filterRuleYAML struct {
	Proto    *yaml.Node `yaml:"proto"`
	Src      *yaml.Node `yaml:"src"`
	Dst      *yaml.Node `yaml:"dst"`
	SrcPort  *yaml.Node `yaml:"src_port"`
	DstPort  *yaml.Node `yaml:"dst_port"`
	VLAN     *yaml.Node `yaml:"vlan"`
	TCPFlags *yaml.Node `yaml:"tcp_flags"`
	Class    *yaml.Node `yaml:"class"`
	Fragment *yaml.Node `yaml:"fragment"`
	CT       *yaml.Node `yaml:"ct"`
	CTDir    *yaml.Node `yaml:"ct_dir"`
	Action   *yaml.Node `yaml:"action"`
}

// filterRuleKeys is how many keys a rule has: filterRuleYAML's fields
// (TestFilterRuleKeys).
const filterRuleKeys = 12

// filterRuleField is filterRuleYAML's field index by key (its yaml tags:
// the one list of a rule's keys).
var filterRuleField = func() map[string]int {
	t := reflect.TypeOf(filterRuleYAML{})
	m := make(map[string]int, t.NumField())
	for i := range t.NumField() {
		m[t.Field(i).Tag.Get("yaml")] = i
	}
	return m
}()

// ctStateNames are the ct: values, by rings.CT state.
var ctStateNames = [...]string{
	rings.CTUntracked: "untracked", rings.CTNew: "new", rings.CTEstablished: "established",
	rings.CTRelated: "related", rings.CTInvalid: "invalid",
}

// parseFilterRule decodes one rule node, reporting every problem through c.
func parseFilterRule(c *BuildContext, n *yaml.Node) (filterRule, bool) {
	var y filterRuleYAML
	var r filterRule
	if n.Kind != yaml.MappingNode {
		c.Errorf(n, "rule: want a mapping of match fields and an action")
		return r, false
	}
	// Unknown keys are reported with the keys known (strictCheck); then
	// each known key's value node is taken where it lies.
	bad := false
	for _, e := range strictCheck(n, &y, nil) {
		c.Errorf(e.node, "%s", e.msg)
		bad = true
	}
	if bad {
		return r, false
	}
	rv := reflect.ValueOf(&y).Elem()
	var first [filterRuleKeys]*yaml.Node // each field's key node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		fi := filterRuleField[k.Value] // strictCheck passed: known
		if first[fi] != nil {
			c.Errorf(k, "duplicate key %s (first at line %d)", clip(k.Value), first[fi].Line)
			return r, false
		}
		first[fi] = k
		rv.Field(fi).Set(reflect.ValueOf(n.Content[i+1]))
	}
	ok := true
	each := func(v *yaml.Node, what string, f func(s string, at *yaml.Node) bool) {
		if v == nil {
			return
		}
		items := []*yaml.Node{v}
		if v.Kind == yaml.SequenceNode {
			items = v.Content
			if len(items) == 0 {
				c.Errorf(v, "%s: empty list", what)
				ok = false
			}
		}
		for _, it := range items {
			if it.Kind != yaml.ScalarNode {
				c.Errorf(it, "%s: want a value or a list of values", what)
				ok = false
				continue
			}
			if !f(it.Value, it) {
				ok = false
			}
		}
	}

	each(y.Proto, "proto", func(s string, at *yaml.Node) bool {
		p, found := protoNames[s]
		if !found {
			v, err := strconv.ParseUint(s, 10, 8)
			if err != nil {
				c.Errorf(at, "proto %q: want tcp, udp, icmp, icmpv6, sctp, gre, esp, ah, igmp, ipv4, ipv6, arp or a number 0-255", s)
				return false
			}
			p = uint16(v)
		}
		r.proto = append(r.proto, p)
		return true
	})
	for _, a := range []struct {
		n    *yaml.Node
		name string
		dst  *[]netip.Prefix
	}{{y.Src, "src", &r.src}, {y.Dst, "dst", &r.dst}} {
		each(a.n, a.name, func(s string, at *yaml.Node) bool {
			p, err := parsePrefixOrAddr(s)
			if err != nil {
				c.Errorf(at, "%s %q: want an address or CIDR prefix", a.name, s)
				return false
			}
			*a.dst = append(*a.dst, p)
			return true
		})
	}
	for _, a := range []struct {
		n    *yaml.Node
		name string
		dst  *[]portRange
	}{{y.SrcPort, "src_port", &r.srcPort}, {y.DstPort, "dst_port", &r.dstPort}} {
		each(a.n, a.name, func(s string, at *yaml.Node) bool {
			pr, msg := parseRange(s, 65535)
			if msg != "" {
				c.Errorf(at, "%s %q: %s", a.name, s, msg)
				return false
			}
			*a.dst = append(*a.dst, pr)
			return true
		})
	}
	r.hasVLAN = y.VLAN != nil
	each(y.VLAN, "vlan", func(s string, at *yaml.Node) bool {
		if s == "none" {
			r.vlanNone = true
			return true
		}
		pr, msg := parseRange(s, 4095)
		if msg != "" {
			c.Errorf(at, "vlan %q: %s (or none for untagged)", s, msg)
			return false
		}
		r.vlan = append(r.vlan, pr)
		return true
	})
	r.hasTCP = y.TCPFlags != nil
	each(y.TCPFlags, "tcp_flags", func(s string, at *yaml.Node) bool {
		good := true
		for _, f := range strings.Split(s, ",") {
			f = strings.TrimSpace(f)
			neg := strings.HasPrefix(f, "!")
			f = strings.TrimPrefix(f, "!")
			bit := -1
			for i, name := range tcpFlagBits {
				if name == f {
					bit = i
				}
			}
			if bit < 0 {
				c.Errorf(at, "tcp_flags: unknown flag %q (known: %s, each optionally prefixed by !)", f, strings.Join(tcpFlagBits[:], " "))
				good = false
				continue
			}
			if neg {
				r.tcpClear |= 1 << bit
			} else {
				r.tcpSet |= 1 << bit
			}
		}
		if good && r.tcpSet&r.tcpClear != 0 {
			c.Errorf(at, "tcp_flags %q: a flag cannot be both set and clear", s)
			good = false
		}
		return good
	})
	r.hasClass = y.Class != nil
	each(y.Class, "class", func(s string, at *yaml.Node) bool {
		if s == "malformed" {
			m := malformedClasses()
			for i := range r.class {
				r.class[i] |= m[i]
			}
			return true
		}
		cl, found := rings.ClassByName(s)
		if !found {
			var names []string
			for i := 0; i < rings.NumClasses; i++ {
				names = append(names, rings.Class(i).String())
			}
			c.Errorf(at, "class %q: unknown (known: %s, malformed)", s, strings.Join(names, ", "))
			return false
		}
		r.class[cl/64] |= 1 << (cl % 64)
		return true
	})
	if y.Fragment != nil {
		if y.Fragment.Kind != yaml.ScalarNode || y.Fragment.Decode(&r.frag) != nil {
			c.Errorf(y.Fragment, "fragment %q: want true or false", y.Fragment.Value)
			ok = false
		}
		r.hasFrag = true
	}
	each(y.CT, "ct", func(s string, at *yaml.Node) bool {
		for st, name := range ctStateNames {
			if name == s {
				r.ctStates |= 1 << st
				return true
			}
		}
		c.Errorf(at, "ct %q: want new, established, related, invalid or untracked", s)
		return false
	})
	each(y.CTDir, "ct_dir", func(s string, at *yaml.Node) bool {
		switch s {
		case "original":
			r.ctDirs |= 1
		case "reply":
			r.ctDirs |= 2
		default:
			c.Errorf(at, "ct_dir %q: want original or reply", s)
			return false
		}
		return true
	})
	switch {
	case y.Action == nil || (y.Action.Kind == yaml.ScalarNode && y.Action.Value == ""):
		c.Errorf(n, "rule: missing action (accept, drop:<reason> or a stage name)")
		ok = false
	default:
		t, good := parseAction(c, y.Action)
		r.action = t
		ok = ok && good
	}
	return r, ok
}

// parseAction decodes an action or default: "accept" gives the zero Target.
func parseAction(c *BuildContext, n *yaml.Node) (Target, bool) {
	if n.Kind != yaml.ScalarNode {
		c.Errorf(n, "action: want accept, drop:<reason> or a stage name")
		return Target{}, false
	}
	switch n.Value {
	case "accept":
		return Target{}, true
	case "drop":
		c.Errorf(n, "action %q: want drop:<reason>", n.Value)
		return Target{}, false
	}
	return c.ParseTarget(n.Value, n)
}

// parsePrefixOrAddr parses "10.0.0.0/8" or "10.1.2.3" (a host prefix),
// returning the prefix masked. IPv4-mapped IPv6 addresses stay IPv6.
func parsePrefixOrAddr(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, err
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	if a.Zone() != "" {
		return netip.Prefix{}, strconv.ErrSyntax
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// parseRange parses "N" or "LO-HI" within 0..max; it returns a message
// describing the problem, or "".
func parseRange(s string, max uint64) (portRange, string) {
	lo, hi, isRange := strings.Cut(s, "-")
	a, err := strconv.ParseUint(strings.TrimSpace(lo), 10, 32)
	if err != nil {
		return portRange{}, "want a number, a range lo-hi or a list"
	}
	b := a
	if isRange {
		if b, err = strconv.ParseUint(strings.TrimSpace(hi), 10, 32); err != nil {
			return portRange{}, "want a number, a range lo-hi or a list"
		}
	}
	if a > max || b > max {
		return portRange{}, "out of range 0-" + strconv.FormatUint(max, 10)
	}
	if a > b {
		return portRange{}, "range low end is above its high end"
	}
	return portRange{uint16(a), uint16(b)}, ""
}
