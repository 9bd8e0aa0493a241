// Package counters is Warpflow's vocabulary for what a component counted
// beyond the engine's verdicts: a stage's own counters (a filter's hits per
// rule, a count stage's keys, a conntrack table's occupancy), an executor's
// (the GPU's device and fallback packets), a socket's (kicks, wake-ups).
// It is standard library only, a leaf like rings, so every package that
// counts can declare what it counts and every package that prints or
// exports counters can read the declarations, with no import between
// them.
//
// # Declare once, print and export everywhere
//
// A component declares each family of counters once, in a Decl: its name,
// its kind (a Counter only goes up, a Gauge is a level), its unit, the
// label its keys go in and one sentence of help. A stage's kind lists its
// declarations (pipelines.Kind.Counters); each compiled stage lays its
// families out with their bounded key sets (Family.Keys: a filter's rules
// and default, a count stage's protocols), fixed for the stage's life, in
// one Layout. The instance keeps plain counters however suits its hot
// path and, off it, writes them into a flat []Value in layout order.
//
// Everything that shows counters reads Groups (the families with their
// values: what the report, `warpctl stats` and `top`, the JSON of `stats
// --json`, /metrics and the daemon's stats line iterate) and never parses
// a key: the family says what the key means (its label) and whether
// /metrics gives it a series of its own or sums it with the family's other
// folded keys into one series keyed "other" (Family.Fold): every label set
// stays bounded by the configuration, never by the traffic.
//
// # Naming
//
// Names, units and labels are snake_case. A counter's text key is its
// family's name, or name=key for a keyed family ("rule=3", "proto=tcp",
// "total"); its metric is warpflow_<owner>_<name>[_<unit>][_total], the
// owner being the stage kind, "executor" or "socket", with a _bytes_total
// twin when the family counts bytes too (Decl.Bytes).
package counters
