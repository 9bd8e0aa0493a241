package daemon

import (
	"github.com/warpflow/warpflow/pipelines"
)

// CheckPipeline does to cfg's pipeline what New does before it touches
// the kernel: read and compile it, plan its split, and check it against
// cfg (no pass stage under pass: refuse, every tx port mapped to a
// configured interface). For tests of shipped configs.
func CheckPipeline(cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	d := &Daemon{cfg: cfg}
	src, err := readPipelineFile(cfg.PipelinePath())
	if err != nil {
		return err
	}
	g, err := pipelines.Load(cfg.PipelinePath(), src)
	if err != nil {
		return err
	}
	if _, _, err := planOffload(cfg.Offload, g); err != nil {
		return err
	}
	if err := d.checkPass(g); err != nil {
		return err
	}
	_, err = d.portInterfaces(g)
	return err
}

// AddCounts is addCounts: a queue's counts added into the totals.
var AddCounts = addCounts
