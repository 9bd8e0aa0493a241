package pipelines_test

import (
	"fmt"

	"github.com/warpflow/warpflow/pipelines"
	"github.com/warpflow/warpflow/rings"
)

func ExampleLoad() {
	g, err := pipelines.Load("edge.yaml", []byte(`
name: edge
settings: {batch_size: 32}
stages:
  - name: parse
    type: parse
  - name: acl
    type: filter
    default: accept
    rules:
      - {proto: tcp, dst_port: 23, action: "drop:telnet"}
  - {name: out, type: tx, port: eth1}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, s := range g.Stages() {
		fmt.Println(s.Name, s.Kind, s.Edges)
	}
	fmt.Println("ports:", g.Ports())
	fmt.Println("reasons:", g.Reasons())
	// Output:
	// parse parse [acl]
	// acl filter [out drop:telnet]
	// out tx []
	// drop:telnet drop []
	// drop:internal_bad_edge drop []
	// ports: [eth1]
	// reasons: [telnet internal_bad_edge]
}

// Every problem in a config comes back at once, positioned and sorted.
func ExampleLoad_errors() {
	_, err := pipelines.Load("bad.yaml", []byte(`name: bad
settings: {batch_size: 4096}
stages:
  - {name: parse, type: parse, next: acl}
  - {name: out, type: tx, prot: eth0}
`))
	fmt.Println(err)
	// Output:
	// bad.yaml:2:24: settings.batch_size 4096 out of range [1, 1024]
	// bad.yaml:4:38: stage "parse": edge to undefined stage "acl"
	// bad.yaml:5:5: stage "out": tx stage needs a port option
	// bad.yaml:5:27: stage "out": unknown option "prot" (known: port)
}

// One Runner per worker executes the shared Graph on batches in place;
// afterwards every packet carries a verdict.
func ExampleGraph_NewRunner() {
	g, err := pipelines.Load("sink.yaml", []byte(`name: sink
stages:
  - {name: out, type: tx, port: eth0}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	arena, _ := rings.NewArena(rings.DefaultArenaOptions())
	b := rings.NewBatch(g.Settings().BatchSize, arena)
	for i := 0; i < 3; i++ {
		addr, _ := arena.Alloc()
		b.Descs = append(b.Descs, rings.Desc{Addr: addr, Len: 60})
		b.Meta = append(b.Meta, rings.Meta{Seq: uint64(i)})
	}
	r := g.NewRunner(pipelines.RunnerOptions{})
	r.Process(b)
	for _, m := range b.Meta {
		fmt.Println(m.Seq, m.Verdict == rings.VerdictTX, g.Ports()[m.Target])
	}
	st := r.Stats(nil)[0]
	fmt.Println(st.Name, st.Packets, st.Bytes)
	// Output:
	// 0 true eth0
	// 1 true eth0
	// 2 true eth0
	// out 3 180
}
