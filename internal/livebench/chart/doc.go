// Command chart draws a `warpctl bench live --json` result: every case's
// median rate as a bar, the range over its repeats as an error bar, and
// the targets as red marks. It lives apart from warpctl so that warpctl
// does not pull in the plotting modules.
//
//	go run ./internal/livebench/chart -in docs/bench-live.json -out docs/bench-live.png
package main
