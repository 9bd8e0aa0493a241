// Package ctoracle holds the test that checks Warpflow's stateful stages
// (conntrack, nat, reassemble) packet by packet against Linux netfilter,
// the oracle: a router namespace with nftables (ct state rules, snat,
// dnat) forwards the same generated conversations that an in-process
// replay runs through the equivalent pipeline, sent with tcpreplay on two
// interfaces in capture order; the test compares every packet's verdict,
// ct state class and direction, and translated addresses and ports, and
// checks every output checksum. Each difference must match one of the
// explained ones listed in the test, or it fails.
//
// It needs root and the Debian packages nftables, tcpreplay and tcpdump
// (conntrack-tools' conntrack is used for the table dump when present). It
// makes two namespaces of its own (wfct-<pid>-r, the router, and
// wfct-<pid>-t, both traffic ends) and removes them.
package ctoracle
