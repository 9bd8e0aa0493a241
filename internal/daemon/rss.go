package daemon

import (
	"bytes"
	"errors"
	"fmt"
	"sync"

	"github.com/warpflow/warpflow/internal/control"
	"github.com/warpflow/warpflow/internal/nic"
	"github.com/warpflow/warpflow/pipelines"
)

// Symmetric RSS for stateful pipelines.
//
// The engine steers both directions of a flow to one worker, but only
// among the packets of one receive queue: which queue a packet arrives
// on is the NIC's choice, by its RSS hash. With the usual random
// Toeplitz key, a flow's two directions hash differently and can land
// on two queues, two engines, two conntrack tables: each sees half a
// connection (the replies look like new flows, or invalid ones). A
// Toeplitz key made of one repeated 16-bit word hashes (a, b) and
// (b, a) alike (Woo and Park), so both directions share a queue; so does
// the symmetric-XOR input transform some drivers offer (Linux >= 6.8).
//
// When the pipeline has a stateful stage (at start, and at a swap to one
// that has), the daemon gives every receiving interface such a key, of
// the length the driver uses, keeping its hash function, input transform
// and indirection table (a driver hashing other than by Toeplitz gets the
// symmetric-XOR transform instead), reads it back, and says what came of
// it: a log line per interface and stats' rss. veth has no RSS at all
// (every flow is on its one queue). Close writes back the key an
// interface had before (a crash leaves the symmetric one, which spreads
// flows as well).
//
// No key helps across interfaces: each receiving interface's queues have
// engines of their own, so a flow that enters on one interface and is
// answered on another is tracked twice, one direction each. The daemon
// warns when a stateful pipeline runs with more than one receiving
// interface.

// rssSymmetricWord is the repeated 16-bit word of the symmetric key:
// 0x6d5a, the one Woo and Park give, which also spreads flows well.
var rssSymmetricWord = [2]byte{0x6d, 0x5a}

// rssXfrmSymXor is RXH_XFRM_SYM_XOR; rssHashToeplitz is ETH_RSS_HASH_TOP.
const (
	rssXfrmSymXor   = 1
	rssHashToeplitz = 1
)

// RSS outcomes (control.RSSState.Result).
const (
	rssSet         = "set"         // a symmetric key was written
	rssAlready     = "symmetric"   // the key or input transform was symmetric already
	rssUnsupported = "unsupported" // the driver has no RSS key (veth, lo): nothing to set
	rssFailed      = "failed"      // the driver refused the key: flows may split across queues
)

// rssStates keeps the last outcome per interface.
type rssStates struct {
	mu   sync.Mutex
	by   map[string]control.RSSState
	orig map[string]nic.RSS // the keys replaced, written back by Close
	// warned: the warning about several receiving interfaces was logged.
	warned bool
}

// symmetricKey returns a symmetric key of n bytes.
func symmetricKey(n int) []byte {
	k := make([]byte, n)
	for i := range k {
		k[i] = rssSymmetricWord[i%2]
	}
	return k
}

// setSymmetricRSS makes iface's RSS hash symmetric where the driver
// allows, and says how it went: with the Toeplitz hash, a symmetric key
// of the driver's length (input transform kept); with another hash
// function, where a repeated key proves nothing, the symmetric-XOR input
// transform with the key kept. What was written is read back: a driver
// that takes a key and keeps another is a failure, not a success.
func setSymmetricRSS(iface string) (control.RSSState, nic.RSS) {
	return nicRSS.setSymmetric(iface)
}

// rssOps is the driver's side of setSymmetricRSS: internal/nic's
// SIOCETHTOOL calls, or a test's driver.
type rssOps struct {
	driver func(iface string) (nic.Driver, error)
	get    func(iface string) (nic.RSS, error)
	set    func(iface string, key []byte, xfrm uint8) error
}

var nicRSS = rssOps{driver: nic.DriverInfo, get: nic.GetRSS, set: nic.SetRSSKey}

func (o rssOps) setSymmetric(iface string) (control.RSSState, nic.RSS) {
	st := control.RSSState{Interface: iface}
	driver, veth := "the driver", false
	if d, err := o.driver(iface); err == nil && d.Name != "" {
		driver, veth = "the driver ("+d.Name+")", d.Name == "veth"
	}
	r, err := o.get(iface)
	switch {
	case errors.Is(err, nic.ErrNotSupported):
		st.Result = rssUnsupported
		st.Detail = driver + " has no RSS key to set"
		if veth {
			st.Detail += ": a veth's frames arrive on the queue its peer sent them on, so with one queue (the lab's) both directions of a flow meet there"
		}
		return st, r
	case err != nil:
		st.Result, st.Detail = rssFailed, "read the RSS key: "+err.Error()
		return st, r
	}
	if r.InputXfrm&rssXfrmSymXor != 0 {
		st.Result, st.Detail = rssAlready, "symmetric-xor input transform"
		return st, r
	}
	toeplitz := r.HashFunc == rssHashToeplitz || r.HashFunc == 0
	if toeplitz && r.SymmetricKey() {
		st.Result, st.Detail = rssAlready, "repeated 16-bit key"
		return st, r
	}
	if len(r.Key) == 0 {
		st.Result = rssUnsupported
		st.Detail = driver + " reports an RSS key of 0 bytes"
		return st, r
	}
	refused := " (a flow's two directions may arrive on different queues: their engines then track each half apart; use one queue, or set a symmetric key with ethtool -X " + iface + " hkey 6d:5a:6d:5a:...)"
	key, xfrm, how := symmetricKey(len(r.Key)), r.InputXfrm, "repeated 16-bit key"
	if !toeplitz {
		key, xfrm, how = r.Key, r.InputXfrm|rssXfrmSymXor, "symmetric-xor input transform ("+r.HashName()+" hash: a repeated key does not make it symmetric)"
	}
	if err := o.set(iface, key, xfrm); err != nil {
		st.Result, st.Detail = rssFailed, "write a "+how+": "+err.Error()+refused
		return st, r
	}
	got, err := o.get(iface)
	if err != nil {
		st.Result, st.Detail = rssFailed, "read back the RSS key written: "+err.Error()+refused
		return st, r
	}
	if !bytes.Equal(got.Key, key) || got.InputXfrm != xfrm {
		st.Result, st.Detail = rssFailed, fmt.Sprintf("%s took the %s but reads back key %x, input transform %d%s", driver, how, got.Key, got.InputXfrm, refused)
		return st, r
	}
	st.Result, st.Detail = rssSet, how
	return st, r
}

// ensureSymmetricRSS gives the receiving interfaces a symmetric key when
// g has a stateful stage, once per interface (a later stateful pipeline
// finds it done), logging each outcome.
func (d *Daemon) ensureSymmetricRSS(g *pipelines.Graph) {
	if len(g.StatefulStages()) == 0 {
		return
	}
	d.rss.mu.Lock()
	defer d.rss.mu.Unlock()
	if d.rss.by == nil {
		d.rss.by = map[string]control.RSSState{}
	}
	var receiving []string
	for _, in := range d.cfg.Interfaces {
		if in.Receives() {
			receiving = append(receiving, in.Name)
		}
	}
	if len(receiving) > 1 && !d.rss.warned {
		d.rss.warned = true
		d.log.Warn("stateful stages with more than one receiving interface: each interface's queues keep their own tables, so a flow whose two directions enter on different interfaces is tracked twice, one direction each (its replies are new or invalid); receive both directions on one interface", "interfaces", receiving)
	}
	for _, in := range d.cfg.Interfaces {
		if !in.Receives() {
			continue
		}
		if st, ok := d.rss.by[in.Name]; ok && st.Result != rssFailed {
			continue
		}
		st, was := setSymmetricRSS(in.Name)
		d.rss.by[in.Name] = st
		if st.Result == rssSet {
			if d.rss.orig == nil {
				d.rss.orig = map[string]nic.RSS{}
			}
			d.rss.orig[in.Name] = was
		}
		args := []any{"interface", in.Name, "result", st.Result}
		if st.Detail != "" {
			args = append(args, "detail", st.Detail)
		}
		if st.Result == rssFailed {
			d.log.Warn("symmetric rss for stateful stages", args...)
		} else {
			d.log.Info("symmetric rss for stateful stages", args...)
		}
	}
}

// rssStats is stats' rss: the outcomes by interface, in config order.
func (d *Daemon) rssStats() []control.RSSState {
	d.rss.mu.Lock()
	defer d.rss.mu.Unlock()
	var out []control.RSSState
	for _, in := range d.cfg.Interfaces {
		if st, ok := d.rss.by[in.Name]; ok {
			out = append(out, st)
		}
	}
	return out
}

// restoreRSS writes back the keys ensureSymmetricRSS replaced (Close).
func (d *Daemon) restoreRSS() {
	d.rss.mu.Lock()
	defer d.rss.mu.Unlock()
	for iface, r := range d.rss.orig {
		if err := nicRSS.set(iface, r.Key, r.InputXfrm); err != nil {
			d.log.Warn("restore rss key", "interface", iface, "error", err.Error())
			continue
		}
		d.log.Info("rss key restored", "interface", iface)
	}
	d.rss.orig = nil
}
