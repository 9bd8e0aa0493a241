package pipelines

import "testing"

// starveYAML: a filter in front of the stateful stages drops UDP to port
// 9, so a worker that gets only such packets is busy while conntrack and
// reassemble get none.
const starveYAML = `name: starve
settings: {batch_size: 256}
stages:
  - {name: parse, type: parse}
  - name: acl
    type: filter
    default: accept
    rules:
      - {proto: udp, dst_port: 9, action: "drop:blocked"}
  - {name: ra, type: reassemble, timeout: 1}
  - {name: ct, type: conntrack, size: 4096, timeouts: {udp: 1}}
  - {name: out, type: tx, port: out}
`

// TestRunnerTicksStarvedStages: on a live port (batches with the engine's
// whole time) a conntrack or reassemble stage that stops getting packets
// while its worker keeps getting them (here every packet is dropped by a
// filter in front of it) is ticked, every IdleTickMS, as an idle worker's
// stages are: its flows and datagrams expire at their timeouts and the
// gauges fall. Before, the engine ticked only a worker that got no
// packet, and such a stage kept every flow listed and counted until
// traffic reached it again. A replay's batches (no Epoch) tick nothing,
// starved or not: its clock stays the capture's.
func TestRunnerTicksStarvedStages(t *testing.T) {
	for _, live := range []bool{true, false} {
		s := newSFRig(t, starveYAML)
		s.epoch = live
		const flows = 50
		for f := range flows {
			s.one(sfUDP(t, cli, srv, uint16(1000+f), 53, 8))
		}
		// A datagram whose later fragments never come (its first
		// fragment, with the ports, is a flow of its own to conntrack).
		s.one(fragV4(t, sfUDP(t, cli, srv, 999, 53, 64), 32)[0])
		const tracked = flows + 1
		ct, ra := s.stage("ct").(*ctStage), s.stage("ra").(*raStage)
		if got := stCounter(ct, "entries"); got != tracked {
			t.Fatalf("entries %d, want %d", got, tracked)
		}
		if got := stCounter(ra, "pending"); got != 1 {
			t.Fatalf("pending %d, want 1", got)
		}
		blocked := sfUDP(t, cli, srv, 5000, 9, 8)
		// Every 10 ms a packet the filter drops: the worker is never
		// idle, the stages behind the filter get nothing. The flows'
		// timeout is 1 s; the sweep takes them within ctSweepPeriod.
		limit := s.now + 1000 + ctSweepPeriod + 2*IdleTickMS
		for s.now < limit && (stCounter(ct, "expiries") < tracked || stCounter(ra, "expiries") < 1) {
			s.advance(10)
			if o := s.one(blocked); o.reason != "drop:blocked" {
				t.Fatalf("the blocked packet: %s", o.reason)
			}
		}
		ctx, rax := stCounter(ct, "expiries"), stCounter(ra, "expiries")
		if !live {
			if ctx != 0 || rax != 0 || stCounter(ct, "entries") != tracked || stCounter(ra, "pending") != 1 {
				t.Fatalf("replay-like batches: %d flows and %d datagrams expired (entries %d, pending %d): a replay was ticked",
					ctx, rax, stCounter(ct, "entries"), stCounter(ra, "pending"))
			}
			continue
		}
		if ctx != tracked || stCounter(ct, "entries") != 0 {
			t.Fatalf("%d ms on, behind a filter that drops everything: %d of %d flows expired, entries %d",
				s.now-limit+1000+ctSweepPeriod+2*IdleTickMS, ctx, tracked, stCounter(ct, "entries"))
		}
		if rax != 1 || stCounter(ra, "pending") != 0 {
			t.Fatalf("the lost datagram: expiries %d, pending %d", rax, stCounter(ra, "pending"))
		}
		// The stages were not run: ticks, not packets, moved them.
		if ct.tab.n != 0 {
			t.Fatalf("the table holds %d flows", ct.tab.n)
		}
	}
}
