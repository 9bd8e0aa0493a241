package main

import (
	"fmt"
	"os"
)

func main() {
	err := newRootCommand().Execute()
	if err == nil {
		return
	}
	if msg := err.Error(); msg != "" {
		fmt.Fprintln(os.Stderr, "warpctl:", msg)
	}
	os.Exit(exitCode(err))
}
