package daemon_test

import (
	"time"

	"github.com/warpflow/warpflow/internal/testwait"
)

// replayWithin is how long tcpreplay may take to send n packets at pps:
// the run's own length plus testwait.Deadline.
func replayWithin(n, pps int) time.Duration {
	return time.Duration(n)*time.Second/time.Duration(pps) + testwait.Deadline
}
