package dataplane_test

import (
	"context"
	"fmt"
	"time"

	"github.com/warpflow/warpflow/dataplane"
	"github.com/warpflow/warpflow/pipelines"
	"github.com/warpflow/warpflow/rings"
)

// An engine over an endless input (here a capture replayed forever, as a
// live port would never end) runs until its context is done, then stops
// cleanly; its Stats are readable while it runs and after.
func ExampleEngine_RunContext() {
	g, err := pipelines.Default()
	if err != nil {
		panic(err)
	}
	arena, err := rings.NewArena(rings.DefaultArenaOptions())
	if err != nil {
		panic(err)
	}
	ro := dataplane.DefaultReplayOptions()
	ro.Loops = -1 // forever
	in, err := dataplane.OpenReplay("../testdata/captures/mixed.pcap", arena, ro)
	if err != nil {
		panic(err)
	}
	defer in.Close()
	outs := dataplane.Outputs{Ports: map[string]dataplane.Port{}, Pass: dataplane.NewNullPort("pass")}
	for _, name := range g.Ports() {
		outs.Ports[name] = dataplane.NewNullPort(name)
	}
	e, err := dataplane.NewEngine(g, arena, in, outs, dataplane.DefaultOptions())
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err = e.RunContext(ctx, nil)
	s := e.Stats()
	fmt.Println("stopped cleanly:", err == nil)
	fmt.Println("received some:", s.Received > 0)
	fmt.Println("balanced:", s.Balanced())
	fmt.Println("every frame free:", s.Frames.Free == arena.Frames())
	// Output:
	// stopped cleanly: true
	// received some: true
	// balanced: true
	// every frame free: true
}
