package xdp

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// SetTXBudget raises how many frames one copy-mode transmit call (KickTX's
// sendto) sends before returning, XDP_MAX_TX_SKB_BUDGET (Linux 6.17+;
// the kernel's default is 32, its limit the TX ring size). The traffic
// generator uses it to send a whole TX ring per syscall. Errors wrap
// ErrNotSupported where the kernel lacks the option.
func SetTXBudget(s *Socket, n int) error {
	if err := unix.SetsockoptInt(s.FD(), unix.SOL_XDP, unix.XDP_MAX_TX_SKB_BUDGET, n); err != nil {
		if err == unix.ENOPROTOOPT {
			return fmt.Errorf("xsk %s queue %d: tx budget %d: %w", s.Interface(), s.Queue(), n, ErrNotSupported)
		}
		return fmt.Errorf("xsk %s queue %d: tx budget %d: %w", s.Interface(), s.Queue(), n, err)
	}
	return nil
}
