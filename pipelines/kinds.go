package pipelines

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
