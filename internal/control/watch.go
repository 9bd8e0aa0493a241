package control

import "time"

// WatchStats is what the daemon's pipeline watch (config watch: true)
// did: it follows the pipeline file, swaps a changed valid file in live
// and refuses an invalid one, the running pipeline kept.
type WatchStats struct {
	File string `json:"file"`
	// Watching is whether the file's directory is watched now (false
	// while it is missing: the watch is retried every second).
	Watching bool `json:"watching"`
	// InSync is whether the file holds what runs from it: the startup
	// pipeline or the last file swapped in. False after a refused or
	// failed change, until the file is fixed: a fleet's rollout is done
	// when every daemon says true.
	InSync bool `json:"in_sync"`
	// Swapped, Refused and Failed count changes of the file's content:
	// swapped in; refused (unreadable, too large, invalid, or it cannot
	// run on this daemon); failed (valid, but a queue refused the swap).
	Swapped uint64 `json:"swapped"`
	Refused uint64 `json:"refused"`
	Failed  uint64 `json:"failed"`
	// Last is the latest change's outcome.
	Last *WatchEvent `json:"last,omitempty"`
}

// Watch outcomes (WatchEvent.Result, the result label of
// warpflow_pipeline_watch_total).
const (
	WatchSwapped = "swapped"
	WatchRefused = "refused"
	WatchFailed  = "failed"
)

// WatchEvent is one change of the watched file.
type WatchEvent struct {
	At     time.Time `json:"at"`
	Result string    `json:"result"`
	// SHA256 is the first 12 hex digits of the content's sha256.
	SHA256 string `json:"sha256"`
	// Pipeline and Generation are what runs after a swap.
	Pipeline   string `json:"pipeline,omitempty"`
	Generation uint64 `json:"generation,omitempty"`
	// Error says why it was refused or failed (a short prefix).
	Error string `json:"error,omitempty"`
}
