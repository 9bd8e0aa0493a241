// Package chartutil holds what the benchmark chart commands
// (internal/bench/chart, internal/bench/scalingchart,
// internal/livebench/chart, gpu/chart) draw alike: the project's colours,
// horizontal median bars, min..max whiskers around them, red target
// marks, the wrapped caption and the JSON result they read. Only those commands import it, so that no
// other binary carries the plotting modules.
package chartutil
