//go:build race

package daemon_test

// raceEnabled: the test binary runs under -race, and so do the daemons it
// builds.
const raceEnabled = true
