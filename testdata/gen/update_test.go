package main

import "flag"

// This package has no golden files; it accepts -update so that
// `go test ./... -update` (which rewrites the goldens of the packages
// that have some) runs here too instead of failing on an unknown flag.
var _ = flag.Bool("update", false, "no effect in this package")
