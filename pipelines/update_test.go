package pipelines

import "flag"

// update makes golden-file tests rewrite their goldens (`go test ./... -update`).
var update = flag.Bool("update", false, "rewrite golden files (testdata/pipelines/invalid/*.err)")
