// Package benchshape writes the bench's default-shape pipeline as config
// text: parse, a filter of N rules that the bench traffic misses, SNAT
// plus MAC swap, count by protocol, tx to port "sink". internal/bench's
// target row (RowDefault1k) and the pipelines and dataplane benchmarks
// that measure parts of that row all take it from here, so that they
// measure the same pipeline. It depends on nothing else in the module, so
// any package's tests may import it.
package benchshape
