package pipelines

// filterKind is the built-in "filter" stage. STUB: replaced by its real implementation.
var filterKind = Kind{Name: "filter", Build: nil}
