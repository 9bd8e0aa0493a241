// Package yamlbound bounds YAML input before anything interprets it.
//
// yaml.v3 builds a whole node tree before a caller can look at it, and a
// tree with aliases is a graph: anything that walks it following aliases
// (a decode into Go values, a printer, a strict-field check) expands it,
// so a few hundred bytes of nested aliases cost gigabytes. A tree of
// millions of tiny nodes costs a hundred-odd bytes per node before the
// first check runs. Check runs first, over the raw bytes, with no
// allocation per token, and refuses:
//
//   - input over Limits.MaxBytes;
//   - the first anchor (&a) or alias (*a), at its token, before anything
//     is expanded or decoded: configs have no use for them;
//   - nesting deeper than Limits.MaxDepth collections;
//   - more than Limits.MaxNodes nodes.
//
// Check is a value-less port of the scanner and parser that yaml.v3 runs
// (go.yaml.in/yaml/v3, itself a port of libyaml): the same token
// boundaries (plain, quoted and block scalars, comments, simple keys,
// indentation), the same parser states, so the anchors it sees are the
// ones yaml.v3 would see and its node and depth counts are the ones of the
// tree yaml.v3 would build (the fuzz target FuzzCheckMatchesYAMLv3 holds
// it to that). Where yaml.v3 would stop with a syntax error, Check stops
// too and accepts what it read: yaml.v3 reports the error, having built
// no more than Check counted. Check keeps no token values, only a bounded
// queue of token kinds and positions (a simple key's lookahead is at most
// 1024 characters) and stacks no deeper than MaxDepth.
//
// What it costs: memory independent of the input (a few KB); time linear
// in the bytes read, and the bytes read stop at the first refusal.
//
// Callers still keep their own tree-level checks (no alias is ever
// followed): Check is the bound, not the only line.
package yamlbound
