package bench

import "github.com/warpflow/warpflow/internal/benchshape"

// Pipelines measured by the bench, as config text. All of them end in a tx
// stage on port "sink", which the bench binds to a null port.

const parseOnlyPipeline = `
name: bench-parse
stages:
  - {name: parse, type: parse}
  - {name: out, type: tx, port: sink}
`

const macswapPipeline = `
name: bench-macswap
stages:
  - {name: parse, type: parse}
  - {name: swap, type: rewrite, swap_macs: true}
  - {name: out, type: tx, port: sink}
`

// defaultPipeline1k is the default pipeline's shape (parse, filter, rewrite,
// count) with a 1000-rule filter: rules over source prefixes, destination
// ports and protocols that the bench traffic does not match, so every
// packet is checked against the whole rule set before the default accepts
// it, the worst case for a rule scan.
func defaultPipeline1k() string { return defaultPipelineN(1000) }

func defaultPipelineN(rules int) string { return benchshape.Default("bench-default-1k", rules) }
