package pipelines

// sampleKind is the built-in "sample" stage. STUB: replaced by its real implementation.
var sampleKind = Kind{Name: "sample", Build: nil}
