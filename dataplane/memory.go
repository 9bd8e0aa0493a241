package dataplane

import (
	"fmt"

	"github.com/warpflow/warpflow/internal/meminfo"
)

// tableRoomShare is the share of the memory the process can still take
// that a pipeline's stage tables may claim: the rest is for everything
// else (frames, the Go heap, the kernel's own needs under load).
const tableRoomShare = 0.9

// memRoom is meminfo.Available (a test sets a room of its own).
var memRoom = meminfo.Available

// CheckTableMemory refuses, with the figures and the fix, stage tables
// of need bytes for a pipeline's runners (the sum over them) that would
// not fit in what this process can still take (internal/meminfo: the
// kernel's MemAvailable, or the room under a cgroup's memory limit, v2
// memory.max or v1 memory.limit_in_bytes):
// allocated anyway, they would end in the OOM killer or the Go runtime's
// fatal "out of memory" when the workers first run, after the load or
// swap had been accepted. Where the room cannot be read nothing is
// refused.
func CheckTableMemory(pipeline string, need uint64, runners int) error {
	if need == 0 {
		return nil
	}
	room, ok := memRoom()
	if !ok || float64(need) <= tableRoomShare*float64(room.Bytes) {
		return nil
	}
	whose := "one worker's"
	if runners != 1 {
		whose = fmt.Sprintf("%d workers'", runners)
	}
	return fmt.Errorf("pipeline %q: its stage tables need %s (%s stateful stage tables), more than %.0f%% of the %s this process can still take (%s): lower conntrack's size or reassemble's max_datagrams and max_bytes, or use fewer workers",
		pipeline, byteSize(need), whose, tableRoomShare*100, byteSize(room.Bytes), room.Source)
}

// TableBytes is the stage tables the engine's current plan's runners
// allocate when they first run, and how many runners: what NewEngine
// checked, for a caller that builds several engines (the daemon, one a
// queue) to check their sum.
func (e *Engine) TableBytes() (bytes uint64, runners int) {
	e.ctl.mu.Lock()
	defer e.ctl.mu.Unlock()
	return e.ctl.latest.tableBytes, e.ctl.latest.runnerN
}
