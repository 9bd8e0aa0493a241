// Command hello is the tiny static binary internal/image's tests build
// into an image instead of warpflowd (same flags, a fraction of the
// compile time).
package main

import "fmt"

func main() { fmt.Println("hello from the warpflow image test") }
