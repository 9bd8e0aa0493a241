// Package testwait is the tests' bounded waits: a receive, a WaitGroup, a
// child process's exit, each failing the test at a deadline with a message
// naming what it waited for and how long ("gave up after 30s waiting for
// warpflowd to exit after SIGKILL"), instead of hanging until go test's
// timeout kills the whole binary without saying which wait it was.
//
// Tests only: nothing outside a _test.go file imports it.
package testwait
