package main

import (
	"fmt"
	"io"
	"time"

	"github.com/warpflow/warpflow/internal/control"
)

// printWatch writes the pipeline file watch's line (and its last change)
// for stats.
func printWatch(w io.Writer, ws *control.WatchStats) {
	state := "in sync"
	if !ws.InSync {
		state = "NOT in sync: the file holds a change that was not swapped in"
	}
	if !ws.Watching {
		state += "; its directory is not watched now"
	}
	fmt.Fprintf(w, "watch %s: %s; swapped %d, refused %d, failed %d\n", ws.File, state, ws.Swapped, ws.Refused, ws.Failed)
	if l := ws.Last; l != nil {
		fmt.Fprintf(w, "  last change %s (sha256 %s) at %s", l.Result, l.SHA256, l.At.Format(time.RFC3339))
		if l.Pipeline != "" {
			fmt.Fprintf(w, ": %s, generation %d", l.Pipeline, l.Generation)
		}
		if l.Error != "" {
			fmt.Fprintf(w, ": %s", l.Error)
		}
		fmt.Fprintln(w)
	}
}
