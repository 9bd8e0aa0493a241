// Command gen writes the capture files under testdata/captures.
//
//	go run ./testdata/gen -out testdata/captures
//
// Output is deterministic: fixed addresses, ports, sequence numbers and
// timestamps and no randomness, so every run writes the same bytes and
// gen_test.go can hold the committed files to them. Change a capture by
// changing this program, rerunning it and committing both.
package main
