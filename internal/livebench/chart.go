package livebench

import "errors"

// Chart draws res to path.
func Chart(res Result, path string) error { return errors.New("chart: not yet") }
