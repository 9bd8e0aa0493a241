package pipelines

import (
	"sort"

	"github.com/warpflow/warpflow/counters"
)

// builtinKinds returns the stage types a config may name, by type name. It
// returns a fresh map on each call, so a compile may add to it.
func builtinKinds() map[string]Kind {
	m := make(map[string]Kind, 12)
	for _, k := range []Kind{
		parseKind, filterKind, rewriteKind, balanceKind, countKind, sampleKind,
		conntrackKind, natKind, reassembleKind,
		txKind, dropKind, passKind,
	} {
		m[k.Name] = k
	}
	return m
}

// KindCounters is a built-in stage kind's declared counters.
type KindCounters struct {
	Kind     string
	Counters []counters.Decl
}

// DeclaredCounters lists the built-in kinds that declare counters of
// their own, by kind name, with their declarations: what lists every
// family a pipeline can count (the Grafana dashboard).
func DeclaredCounters() []KindCounters {
	var out []KindCounters
	for name, k := range builtinKinds() {
		if len(k.Counters) > 0 {
			out = append(out, KindCounters{Kind: name, Counters: k.Counters})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Kind < out[j].Kind })
	return out
}
