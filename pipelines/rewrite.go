package pipelines

// rewriteKind is the built-in "rewrite" stage. STUB: replaced by its real implementation.
var rewriteKind = Kind{Name: "rewrite", Build: nil}
