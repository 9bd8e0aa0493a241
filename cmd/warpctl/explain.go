package main

import (
	"github.com/warpflow/warpflow/pipelines"
)

// explainOffload returns the split between the XDP program and the
// workers that a live AF_XDP port makes of the pipeline at path under
// offload: auto (validate --explain): the filter rules that move to the
// kernel, the rule that stops the prefix and why.
func explainOffload(path string) (string, error) {
	_, plan, err := pipelines.LoadOffloadFile(path, pipelines.OffloadAuto)
	if err != nil {
		return "", err
	}
	return plan.Explain(), nil
}
