package pipelines

// balanceKind is the built-in "balance" stage. STUB: replaced by its real implementation.
var balanceKind = Kind{Name: "balance", Build: nil}
