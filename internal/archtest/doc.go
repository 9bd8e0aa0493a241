// Package archtest holds no code. Its test keeps the module's structural
// rules from docs/DESIGN.md true as the code grows: which packages may
// reach below Go's memory model (unsafe) or make raw system calls
// (golang.org/x/sys/unix), that the default build has no cgo, and the
// direction of imports between the core packages. A rule broken here is
// a design change: make it in docs/DESIGN.md and in the table below
// together, with the reason.
package archtest
