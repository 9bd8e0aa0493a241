package benchshape

import (
	"fmt"
	"strings"
)

// Default returns the default-shape pipeline named name with a rules-long
// filter: a class rule, then rules over source prefixes, destination ports
// and protocols that the bench traffic does not match, so every packet is
// checked against the whole rule set before the default accepts it, the
// worst case for a rule scan.
func Default(name string, rules int) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, `name: %s
stages:
  - {name: parse, type: parse}
  - name: acl
    type: filter
    default: accept
    rules:
      - {class: malformed, action: "drop:malformed"}
`, name)
	for i := 1; i < rules; i++ {
		switch i % 4 {
		case 0: // a /32 host with a port
			fmt.Fprintf(&sb, "      - {proto: tcp, src: 198.18.%d.%d/32, dst_port: %d, action: \"drop:r%d\"}\n", (i/256)%256, i%256, 1+i%60000, i%8)
		case 1: // a /24 with a port range
			fmt.Fprintf(&sb, "      - {proto: udp, src: 198.19.%d.0/24, dst_port: %d-%d, action: \"drop:r%d\"}\n", i%256, 2000+i%1000, 2100+i%1000, i%8)
		case 2: // a destination prefix, any protocol
			fmt.Fprintf(&sb, "      - {dst: 203.0.%d.%d/32, action: \"drop:r%d\"}\n", (i/256)%256, i%256, i%8)
		case 3: // IPv6 sources: a /48 each, 2001:db8:i::/48 while i fits
			// one group (every size below 65,536 rules), the overflow carried
			// into the second group above that, so every prefix stays valid.
			fmt.Fprintf(&sb, "      - {src: \"2001:%x:%x::/48\", dst_port: %d, action: \"drop:r%d\"}\n", 0xdb8+i>>16, i&0xffff, 1+i%60000, i%8)
		}
	}
	// The rewrite is idempotent (source NAT to one address and port, with
	// incremental checksum updates, and a MAC swap), because a preloaded
	// capture is looped in place: a TTL decrement would expire every
	// packet after 64 passes.
	sb.WriteString(`  - {name: nat, type: rewrite, swap_macs: true, snat: {addr: 198.51.100.1, port: 4000}}
  - {name: flows, type: count, by: [protocol]}
  - {name: out, type: tx, port: sink}
`)
	return sb.String()
}
