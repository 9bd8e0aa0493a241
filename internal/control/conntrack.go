package control

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// The conntrack endpoints: the flow tables of the running pipeline's
// conntrack stage, summed over the queues and their workers.
//
//	GET    /v1/conntrack?FILTERS&limit=N   list (limit 0: count only)
//	DELETE /v1/conntrack?FILTERS           flush what matches (all when no filter)
//
// Filters (query parameters, all optional): stage (the conntrack stage,
// when the pipeline has more than one), proto (tcp, udp, icmp, icmpv6 or
// a number), src, dst (address or prefix of the original direction), addr
// (either address of either direction), port (either port of either
// direction), sport, dport (of the original direction), state (a TCP state
// such as ESTABLISHED or TIME_WAIT, or unreplied, replied, assured). A
// query string that does not parse whole (a bad escape, a semicolon) and
// a parameter given empty are refused (400), never read as "no filter":
// for a flush that would widen what is deleted. A flush is a mutating verb: over TCP it needs the control token like every
// non-GET request (the server's guard).

// ConntrackBackend is what a backend implements to serve the conntrack
// endpoints; a backend without it answers them not found.
type ConntrackBackend interface {
	Conntrack(ctx context.Context, q ConntrackQuery) (ConntrackReply, error)
}

// MaxConntrackList bounds a listing's flows.
const MaxConntrackList = 100_000

// conntrackTimeout bounds how long a request waits for the workers.
const conntrackTimeout = 10 * time.Second

// ConntrackQuery is a list, count or flush.
type ConntrackQuery struct {
	Stage   string `json:"stage,omitempty"`
	Proto   uint8  `json:"proto,omitempty"`
	Src     string `json:"src,omitempty"` // prefixes, as given
	Dst     string `json:"dst,omitempty"`
	Addr    string `json:"addr,omitempty"`
	Port    uint16 `json:"port,omitempty"`
	SrcPort uint16 `json:"sport,omitempty"`
	DstPort uint16 `json:"dport,omitempty"`
	State   string `json:"state,omitempty"`
	Limit   int    `json:"limit,omitempty"`
	Flush   bool   `json:"flush,omitempty"`
}

// ConntrackFlow is one tracked flow. For ICMP and ICMPv6 queries the
// ports are what the flow is keyed by: sport the identifier and dport
// the type and code (type<<8 | code), the reply's its own pair; the port
// filters match those values.
type ConntrackFlow struct {
	Queue        string `json:"queue"`
	Proto        uint8  `json:"proto"`
	ProtoName    string `json:"proto_name"`
	Zone         uint16 `json:"zone,omitempty"`
	Src          string `json:"src"`
	Dst          string `json:"dst"`
	SrcPort      uint16 `json:"sport"`
	DstPort      uint16 `json:"dport"`
	ReplySrc     string `json:"reply_src"`
	ReplyDst     string `json:"reply_dst"`
	ReplySrcPort uint16 `json:"reply_sport"`
	ReplyDstPort uint16 `json:"reply_dport"`
	State        string `json:"state,omitempty"`
	Replied      bool   `json:"replied"`
	Assured      bool   `json:"assured"`
	SNAT         bool   `json:"snat,omitempty"`
	DNAT         bool   `json:"dnat,omitempty"`
	// ExpiresMs is how long until the flow times out, on the packets'
	// clock (a replay's capture time; the wall clock live).
	ExpiresMs int64 `json:"expires_ms"`
}

// ConntrackReply is the answer to a ConntrackQuery.
type ConntrackReply struct {
	Pipeline string `json:"pipeline"`
	Stage    string `json:"stage"`
	Queues   int    `json:"queues"`
	// Entries is the flows in the tables, Capacity the flows they hold,
	// TableBytes their memory and BytesPerFlow that per flow of capacity.
	Entries      int     `json:"entries"`
	Capacity     int     `json:"capacity"`
	TableBytes   int     `json:"table_bytes"`
	BytesPerFlow float64 `json:"bytes_per_flow"`
	// Matched is the flows the filters matched (flushed, for a flush).
	Matched   int             `json:"matched"`
	Flushed   bool            `json:"flushed,omitempty"`
	Truncated bool            `json:"truncated,omitempty"`
	Flows     []ConntrackFlow `json:"flows"`
}

var ctProtoNames = map[string]uint8{"tcp": 6, "udp": 17, "icmp": 1, "icmpv6": 58, "sctp": 132, "gre": 47, "udplite": 136}

// ProtoName names IP protocol p as the conntrack endpoints do.
func ProtoName(p uint8) string {
	for n, v := range ctProtoNames {
		if v == p {
			return n
		}
	}
	return strconv.Itoa(int(p))
}

// ctStates are the state filter's values.
var ctStates = []string{"unreplied", "replied", "assured", "SYN_SENT", "SYN_RECV", "ESTABLISHED", "FIN_WAIT",
	"CLOSE_WAIT", "LAST_ACK", "TIME_WAIT", "CLOSE", "SYN_SENT2"}

// ParseConntrackQuery reads and checks a query's parameters, naming the
// first bad one.
func ParseConntrackQuery(v url.Values) (ConntrackQuery, error) {
	var q ConntrackQuery
	known := map[string]bool{"stage": true, "proto": true, "src": true, "dst": true, "addr": true, "port": true,
		"sport": true, "dport": true, "state": true, "limit": true}
	for k, vals := range v {
		if !known[k] {
			return q, Errorf(ErrBadRequest, "conntrack: unknown parameter %q (known: stage, proto, src, dst, addr, port, sport, dport, state, limit)", Clip(k))
		}
		if len(vals) != 1 {
			return q, Errorf(ErrBadRequest, "conntrack: %s given %d times", k, len(vals))
		}
		if vals[0] == "" {
			// An empty filter would select everything: a script's unset
			// variable must not turn a narrow flush into a flush of all.
			return q, Errorf(ErrBadRequest, "conntrack: %s given empty: leave it out to select any", k)
		}
	}
	q.Stage = v.Get("stage")
	if q.Stage != "" && !validStage(q.Stage) {
		return q, Errorf(ErrBadRequest, "conntrack: stage %q: want a stage name", Clip(q.Stage))
	}
	if s := v.Get("proto"); s != "" {
		p, ok := ctProtoNames[strings.ToLower(s)]
		if !ok {
			n, err := strconv.ParseUint(s, 10, 8)
			if err != nil || n == 0 {
				return q, Errorf(ErrBadRequest, "conntrack: proto %q: want tcp, udp, icmp, icmpv6, sctp, gre, udplite or 1-255", Clip(s))
			}
			p = uint8(n)
		}
		q.Proto = p
	}
	for _, f := range []struct {
		name string
		dst  *string
	}{{"src", &q.Src}, {"dst", &q.Dst}, {"addr", &q.Addr}} {
		s := v.Get(f.name)
		if s == "" {
			continue
		}
		if _, err := ParsePrefix(s); err != nil {
			return q, Errorf(ErrBadRequest, "conntrack: %s %q: want an address or prefix (%s)", f.name, Clip(s), Clip(err.Error()))
		}
		*f.dst = s
	}
	for _, f := range []struct {
		name string
		dst  *uint16
	}{{"port", &q.Port}, {"sport", &q.SrcPort}, {"dport", &q.DstPort}} {
		s := v.Get(f.name)
		if s == "" {
			continue
		}
		n, err := strconv.ParseUint(s, 10, 16)
		if err != nil || n == 0 {
			return q, Errorf(ErrBadRequest, "conntrack: %s %q: want a port 1-65535", f.name, Clip(s))
		}
		*f.dst = uint16(n)
	}
	if s := v.Get("state"); s != "" {
		found := false
		for _, st := range ctStates {
			if strings.EqualFold(st, s) {
				q.State, found = st, true
			}
		}
		if !found {
			return q, Errorf(ErrBadRequest, "conntrack: state %q: want one of %s", Clip(s), strings.Join(ctStates, ", "))
		}
	}
	if s := v.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 || n > MaxConntrackList {
			return q, Errorf(ErrBadRequest, "conntrack: limit %q: want 0 to %d", Clip(s), MaxConntrackList)
		}
		q.Limit = n
	}
	return q, nil
}

// Values is q as query parameters (the client's side of
// ParseConntrackQuery).
func (q ConntrackQuery) Values() url.Values {
	v := url.Values{}
	set := func(k, s string) {
		if s != "" {
			v.Set(k, s)
		}
	}
	setPort := func(k string, p uint16) {
		if p != 0 {
			v.Set(k, strconv.Itoa(int(p)))
		}
	}
	set("stage", q.Stage)
	if q.Proto != 0 {
		v.Set("proto", strconv.Itoa(int(q.Proto)))
	}
	set("src", q.Src)
	set("dst", q.Dst)
	set("addr", q.Addr)
	setPort("port", q.Port)
	setPort("sport", q.SrcPort)
	setPort("dport", q.DstPort)
	set("state", q.State)
	if !q.Flush {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	return v
}

// ParsePrefix parses an address (a host prefix) or a prefix, masked. An
// IPv4-mapped IPv6 address (::ffff:10.0.0.1, or a prefix of 96 bits or
// more of them) is its IPv4 address: the tables hold IPv4 flows as IPv4,
// and the mapped form would match none of them without a word. A zone
// (fe80::1%eth0) is refused: flows carry none.
func ParsePrefix(s string) (netip.Prefix, error) {
	var p netip.Prefix
	if strings.Contains(s, "/") {
		var err error
		if p, err = netip.ParsePrefix(s); err != nil {
			return p, err
		}
	} else {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Prefix{}, err
		}
		if a.Zone() != "" {
			return netip.Prefix{}, fmt.Errorf("%q: an address with a zone: flows have none", s)
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	if p.Addr().Is4In6() {
		if p.Bits() < 96 {
			return netip.Prefix{}, fmt.Errorf("%q: reaches past the IPv4-mapped range (::ffff:0:0/96): give an IPv6 prefix or an IPv4 one", s)
		}
		p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
	}
	return p.Masked(), nil
}

func validStage(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

// conntrackValues parses r's query string whole: r.URL.Query() drops a
// pair it cannot parse (a bad escape, a semicolon) without a word, which
// would turn a filtered flush into a wider one.
func conntrackValues(r *http.Request) (url.Values, error) {
	v, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, Errorf(ErrBadRequest, "conntrack: query %q: %s", Clip(r.URL.RawQuery), Clip(err.Error()))
	}
	return v, nil
}

// maxListings is how many conntrack listings are served at once; more
// wait their turn (a client that gives up stops waiting).
const maxListings = 2

// conntrackRoutes registers the endpoints (server.go's routes calls it).
func (s *Server) conntrackRoutes(mux *http.ServeMux) {
	cb, ok := s.b.(ConntrackBackend)
	if !ok {
		return
	}
	list := s.read(func(r *http.Request) (any, error) {
		v, err := conntrackValues(r)
		if err != nil {
			return nil, err
		}
		q, err := ParseConntrackQuery(v)
		if err != nil {
			return nil, err
		}
		ctx, cancel := context.WithTimeout(r.Context(), conntrackTimeout)
		defer cancel()
		return cb.Conntrack(ctx, q)
	})
	mux.HandleFunc("GET /v1/conntrack", func(w http.ResponseWriter, r *http.Request) {
		// A listing holds up to MaxConntrackList flows, several times
		// that in the daemon while its JSON is written: a few at once,
		// not as many as clients care to open.
		select {
		case s.listing <- struct{}{}:
			defer func() { <-s.listing }()
		case <-r.Context().Done():
			return // the client went away while waiting
		}
		list(w, r)
	})
	mux.HandleFunc("DELETE /v1/conntrack", s.action("conntrack flush", func(r *http.Request, _ Peer) (any, []any, error) {
		if err := decodeEmpty(r); err != nil {
			return nil, nil, err
		}
		v, err := conntrackValues(r)
		if err != nil {
			return nil, nil, err
		}
		if v.Has("limit") {
			return nil, nil, Errorf(ErrBadRequest, "conntrack flush: limit does not apply")
		}
		q, err := ParseConntrackQuery(v)
		if err != nil {
			return nil, nil, err
		}
		q.Flush = true
		ctx, cancel := context.WithTimeout(r.Context(), conntrackTimeout)
		defer cancel()
		rep, err := cb.Conntrack(ctx, q)
		return rep, []any{"filters", Clip(r.URL.RawQuery), "flushed", rep.Matched}, err
	}))
}
