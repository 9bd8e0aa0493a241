// Command chart draws a `warpctl bench --json` result as a bar chart: each
// row's median rate, its range over the repeats as an error bar, and the
// targets as marks. It lives apart from warpctl so that warpctl does not
// pull in the plotting, PDF, LaTeX and font modules.
//
//	go run ./internal/bench/chart -in docs/bench.json -out docs/bench.png
//
// -ranges FILE supplies per-row ranges recorded apart (see Ranges) for a
// result written before rows kept every repeat.
package main
