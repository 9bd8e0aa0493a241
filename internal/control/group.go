package control

import (
	"fmt"
	"os/user"
	"strconv"
)

// lookupGroup resolves a group name or number.
func lookupGroup(g string) (int, error) {
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
