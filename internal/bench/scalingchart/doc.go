// Command scalingchart draws a `warpctl bench scaling --json` result: the
// total rate of each shape (workers behind one I/O loop, engines side by
// side) against N, as the median with the range over the repeats as error
// bars, with linear and 0.8x-linear references from the smallest N and the
// I/O loop's ceiling. Like internal/bench/chart it lives apart from warpctl
// so that warpctl does not pull in the plotting modules.
//
//	go run ./internal/bench/scalingchart -in docs/bench-scaling.json -out docs/bench-scaling.png
package main
