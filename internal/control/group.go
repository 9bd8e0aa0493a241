package control

import (
	"fmt"
	"os/user"
	"strconv"
)

// LookupGroup resolves a group name or number (the socket group; the
// daemon gives its capture_dir the same group).
func LookupGroup(g string) (int, error) {
	if n, err := strconv.Atoi(g); err == nil && n >= 0 {
		return n, nil
	}
	gr, err := user.LookupGroup(g)
	if err != nil {
		return 0, fmt.Errorf("control socket group %q: %w", g, err)
	}
	n, err := strconv.Atoi(gr.Gid)
	if err != nil {
		return 0, fmt.Errorf("control socket group %q: gid %q: %w", g, gr.Gid, err)
	}
	return n, nil
}
