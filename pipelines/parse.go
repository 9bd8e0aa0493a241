package pipelines

// parseKind is the built-in "parse" stage. STUB: replaced by its real implementation.
var parseKind = Kind{Name: "parse", Build: nil}
