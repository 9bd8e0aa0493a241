package main

import (
	"errors"
	"fmt"
	"os"
)

func main() {
	err := newRootCommand().Execute()
	if err == nil {
		return
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.msg != "" {
			fmt.Fprintln(os.Stderr, "warpctl:", ee.msg)
		}
		os.Exit(ee.code)
	}
	fmt.Fprintln(os.Stderr, "warpctl:", err)
	os.Exit(1)
}
