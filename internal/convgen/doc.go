// Package convgen builds the packets of TCP, UDP and ICMP conversations
// for tests and benchmarks of the stateful stages (conntrack, nat,
// reassemble): handshakes, data both ways, closes and resets, with
// correct sequence numbers, windows and checksums, and timestamps, and
// writes them as pcap. A conversation's two sides may see each other
// through a translation (a client behind SNAT talks to the server, which
// answers the translated address), so the replies of a captured
// conversation can be generated before any NAT ran.
//
// It allocates freely: it is for building captures, never for a hot path.
package convgen
