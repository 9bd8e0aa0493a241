package livebench

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// napiThreads lists the threaded-NAPI kernel threads of interfaces named
// iface (napi/IFACE-ID). Kernel threads live in no network namespace, so
// another lab's dp0 shows here too: callers compare lists taken before and
// after their own program attached.
func napiThreads(iface string) (map[int]string, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	prefix := "napi/" + iface + "-"
	out := map[int]string{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/comm")
		if err != nil {
			continue // gone
		}
		comm := strings.TrimSpace(string(b))
		if strings.HasPrefix(comm, prefix) {
			out[pid] = comm
		}
	}
	return out, nil
}
