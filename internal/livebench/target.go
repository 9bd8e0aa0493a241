package livebench

// TargetRate is the rate a case must reach, or 0 when it has no target:
// warpflow in setup A 1.5x testpmd's median, warpflow's flood in setup B
// 0.7x its best controlled-load sample.
func TargetRate(crs []CaseResult, c CaseResult) float64 {
	if c.Peer != PeerWarpflow || c.Mode == Stateful.String() {
		return 0 // the stateful mode is compared with the kernel, no target
	}
	switch {
	case c.Setup == SetupDefault:
		if tp := find(crs, SetupDefault, c.Load, c.Mode, PeerTestpmd); tp != nil {
			return 1.5 * tp.Median
		}
	case c.Setup == SetupThreaded && c.Load == LoadFlood:
		if ctl := find(crs, SetupThreaded, LoadControlled, c.Mode, PeerWarpflow); ctl != nil {
			return 0.7 * ctl.Max
		}
	}
	return 0
}
