package pipelines

import _ "embed"

// DefaultConfig is the embedded default pipeline config (default.yaml).
//
//go:embed default.yaml
var DefaultConfig []byte

// DefaultFile is the name the default pipeline's errors and reports use.
const DefaultFile = "embedded:default.yaml"

// Default compiles the embedded default pipeline.
func Default() (*Graph, error) { return Load(DefaultFile, DefaultConfig) }
