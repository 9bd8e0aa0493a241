package livebench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/warpflow/warpflow/internal/cpuaffinity"
	"github.com/warpflow/warpflow/internal/gen"
	"github.com/warpflow/warpflow/internal/hostinfo"
	"github.com/warpflow/warpflow/internal/lab"
)

// Case is one thing measured Repeats times.
type Case struct {
	Setup string `json:"setup"` // SetupDefault or SetupThreaded
	NAPI  string `json:"napi"`  // the setup in words
	Load  string `json:"load"`  // LoadFlood or LoadControlled
	Mode  string `json:"mode"`  // rxonly or macswap
	Peer  string `json:"peer"`  // PeerWarpflow, PeerBefore or PeerTestpmd
}

func (c Case) String() string {
	return fmt.Sprintf("%s %s %s %s", c.Setup, c.Load, c.Mode, c.Peer)
}

// Sample is one measurement of a case, rates in Mpps over the window.
type Sample struct {
	Repeat  int     `json:"repeat"`
	Seconds float64 `json:"window_s"`
	// Rate is the case's figure: Received for rxonly, Forwarded for
	// macswap, Delivered for stateful.
	Rate float64 `json:"mpps"`
	// Received: dp0 rx_queue_0_xdp_redirect (onto the AF_XDP RX ring).
	Received float64 `json:"received_mpps"`
	// KernelDrops: dp0 rx_queue_0_drops (redirects the socket refused:
	// RX ring full, fill ring empty).
	KernelDrops float64 `json:"kernel_drops_mpps"`
	// Arrived: dp0 rx_queue_0_xdp_packets (frames dp0's XDP program ran on).
	Arrived float64 `json:"arrived_mpps"`
	// Offered: gen0 tx_queue_0_xdp_xmit + _errors (frames the generator
	// handed to the veth, taken or refused by dp0's ring); in the
	// stateful mode gen0's tx_packets (its AF_XDP engine's frames).
	Offered float64 `json:"offered_mpps"`
	// Forwarded: gen0 rx_queue_0_xdp_packets (frames back at gen0);
	// DP0TX: dp0's tx_packets.
	Forwarded float64 `json:"forwarded_mpps"`
	DP0TX     float64 `json:"dp0_tx_mpps"`
	// Delivered (stateful mode): sink0 rx_queue_0_xdp_packets, the frames
	// tracked, translated and forwarded out of dp1 (sink0's XDP drop
	// program sees every one).
	Delivered float64 `json:"delivered_mpps,omitempty"`
	// IPIn and IPForwarded (stateful mode): the dataplane namespace's IP
	// InReceives and ForwDatagrams (/proc/net/snmp), the kernel router's
	// own path (near 0 for warpflowd, whose frames skip the stack).
	IPIn        float64 `json:"ip_in_mpps,omitempty"`
	IPForwarded float64 `json:"ip_forwarded_mpps,omitempty"`
	// DPBusy is the share of the dataplane's CPU that was busy during the
	// window (user, system, softirq: the peer and any kernel work there),
	// from /proc/stat; GenBusy the same for the generator's CPU.
	DPBusy  float64 `json:"dp_cpu_busy"`
	GenBusy float64 `json:"gen_cpu_busy"`
	// GenMpps is the generator's own rate over its whole run (its
	// program's XDP_TX count), for the record.
	GenMpps float64 `json:"gen_mpps"`
	// NAPIThread is dp0's NAPI kernel thread and the CPUs it was allowed
	// (setup B).
	NAPIThread string `json:"napi_thread,omitempty"`
	Attach     string `json:"attach"`
	Bind       string `json:"bind"`
	// Report is the peer's own closing line (not a measurement).
	Report string `json:"peer_report,omitempty"`
	Err    string `json:"error,omitempty"`
}

// CaseResult is a case with its samples and their spread.
type CaseResult struct {
	Case
	Samples []Sample `json:"samples"`
	// Min, Median and Max of the samples' Rate (Mpps), errors left out.
	Min    float64 `json:"min_mpps"`
	Median float64 `json:"median_mpps"`
	Max    float64 `json:"max_mpps"`
	// OfferedMedian is the median offered rate.
	OfferedMedian float64 `json:"offered_median_mpps"`
	// DPBusyMedian is the median busy share of the dataplane's CPU.
	DPBusyMedian float64 `json:"dp_cpu_busy_median"`
	Attach       string  `json:"attach"`
	Bind         string  `json:"bind"`
	Errors       int     `json:"errors"`
}

// Target is one of the targets, judged on medians.
type Target struct {
	Name  string  `json:"name"`
	Ratio float64 `json:"ratio"`
	Want  float64 `json:"want"`
	Met   bool    `json:"met"`
	// Low and High are the ratio's range over the repeats (each repeat's
	// own pair, measured minutes apart at most).
	Low  float64 `json:"low"`
	High float64 `json:"high"`
	Note string  `json:"note,omitempty"`
}

// Result is a whole run.
type Result struct {
	Start     time.Time    `json:"start"`
	Kernel    string       `json:"kernel"`
	Machine   string       `json:"machine"` // hostinfo.CPU
	GoVersion string       `json:"go"`
	Generator string       `json:"generator"`
	Options   OptionsJSON  `json:"options"`
	Cases     []CaseResult `json:"cases"`
	Targets   []Target     `json:"targets"`
}

// OptionsJSON is the part of Options a result records.
type OptionsJSON struct {
	Repeats         int     `json:"repeats"`
	WarmupS         float64 `json:"warmup_s"`
	WindowS         float64 `json:"window_s"`
	GenCPU          int     `json:"gen_cpu"`
	DPCPU           int     `json:"dp_cpu"`
	ControlledRate  float64 `json:"controlled_rate_pps"`
	ControlledBurst int     `json:"controlled_burst"`
	FloodRate       float64 `json:"flood_rate_pps"`
	Flows           int     `json:"flows"`
	Rings           Rings   `json:"warpflowd_rings"`
	TestpmdArgs     string  `json:"testpmd_args"`
}

func napiName(setup string) string {
	if setup == SetupThreaded {
		return "threaded NAPI, napi/dp0 kthread pinned to the dataplane's CPU"
	}
	return "default NAPI (softirq on the sender's CPU)"
}

// cases lists a setup's cases in their base order.
func (o Options) cases(setup string) []Case {
	loads := []string{LoadFlood}
	if setup == SetupThreaded {
		loads = []string{LoadControlled, LoadFlood}
	}
	peers := []string{PeerWarpflow}
	if o.Testpmd != "" {
		peers = append(peers, PeerTestpmd)
	}
	if o.Before != "" && setup == SetupThreaded {
		peers = append(peers, PeerBefore)
	}
	var cs []Case
	for _, m := range o.Modes {
		mpeers := peers
		if m == Stateful { // warpflowd beside the kernel router (stateful.go)
			mpeers = []string{PeerWarpflow, PeerNftables}
		}
		for _, l := range loads {
			for _, p := range mpeers {
				cs = append(cs, Case{Setup: setup, NAPI: napiName(setup), Load: l, Mode: m.String(), Peer: p})
			}
		}
	}
	return cs
}

func (o Options) logf(format string, args ...any) {
	if o.Log != nil {
		fmt.Fprintf(o.Log, format+"\n", args...)
	}
}

// Run measures every case of every setup, Repeats times, interleaved, and
// judges the targets. It needs root. It builds the lab o.Prefix for each
// setup (replacing one left over) and removes it at the end.
func Run(ctx context.Context, o Options) (Result, error) {
	if err := o.validate(); err != nil {
		return Result{}, err
	}
	if os.Geteuid() != 0 {
		return Result{}, errors.New("bench live: needs root (network namespaces, veth, XDP, AF_XDP)")
	}
	var err error
	if o.Warpflowd, err = exec.LookPath(o.Warpflowd); err != nil {
		return Result{}, fmt.Errorf("warpflowd binary: %w", err)
	}
	if o.Before != "" {
		if o.Before, err = exec.LookPath(o.Before); err != nil {
			return Result{}, fmt.Errorf("before binary: %w", err)
		}
	}
	if o.Testpmd != "" {
		if o.Testpmd, err = exec.LookPath(o.Testpmd); err != nil {
			return Result{}, fmt.Errorf("dpdk-testpmd: %w (install it as .ci/run does, or pass --testpmd '')", err)
		}
	}
	if err := cpuaffinity.PinProcess(0, o.GenCPU); err != nil {
		return Result{}, fmt.Errorf("pin this process to the generator's cpu: %w", err)
	}
	dir, err := os.MkdirTemp("", "livebench")
	if err != nil {
		return Result{}, err
	}
	defer os.RemoveAll(dir)

	res := Result{Start: time.Now().UTC(), GoVersion: runtime.Version(),
		Generator: fmt.Sprintf("internal/gen XDP live frames (BPF_PROG_RUN, BPF_F_TEST_XDP_LIVE_FRAMES, XDP_TX) on gen0 in %s, CPU %d, %d-byte UDP frames, %d flows", lab.GenNS(o.Prefix), o.GenCPU, gen.MinFrame, o.Flows),
		Options: OptionsJSON{Repeats: o.Repeats, WarmupS: o.Warmup.Seconds(), WindowS: o.Window.Seconds(),
			GenCPU: o.GenCPU, DPCPU: o.DPCPU, ControlledRate: o.ControlledRate, ControlledBurst: o.ControlledBurst,
			FloodRate: o.FloodRate, Flows: o.Flows, Rings: o.Rings,
			TestpmdArgs: "nsenter " + strings.Join(testpmdArgs("dpdk-testpmd", lab.DPNS(o.Prefix), [2]int{o.GenCPU, o.DPCPU}, "PREFIX", RXOnly), " ")}}
	if slices.Contains(o.Modes, Stateful) {
		res.Generator += "; the stateful mode's: internal/gen's AF_XDP engine (copy mode) instead, the same frames"
	}
	res.Machine = hostinfo.CPU()
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		res.Kernel = strings.TrimSpace(string(b))
	}
	for _, setup := range o.Setups {
		crs, err := o.runSetup(ctx, setup, dir)
		res.Cases = append(res.Cases, crs...)
		if err != nil {
			return res, err
		}
	}
	res.Targets = judge(res.Cases)
	return res, nil
}

func (o Options) runSetup(ctx context.Context, setup, dir string) ([]CaseResult, error) {
	lo := lab.DefaultOptions()
	lo.Prefix, lo.Force = o.Prefix, true
	if setup == SetupThreaded {
		lo.NAPI = lab.NAPIThreaded
	}
	if _, err := lab.Up(lo); err != nil {
		return nil, fmt.Errorf("setup %s: lab up: %w", setup, err)
	}
	defer func() {
		if err := lab.Down(o.Prefix); err != nil {
			o.logf("lab down %s: %v", o.Prefix, err)
		}
	}()
	cases := o.cases(setup)
	crs := make([]CaseResult, len(cases))
	for i, c := range cases {
		crs[i].Case = c
	}
	for r := range o.Repeats {
		for k := range cases {
			i := (k + r) % len(cases) // rotated: every case takes every slot in turn
			if err := ctx.Err(); err != nil {
				return crs, err
			}
			s := o.measure(ctx, cases[i], r, dir)
			if s.Err != "" {
				o.logf("%-40s repeat %d: error: %s", cases[i], r, s.Err)
			} else {
				o.logf("%-40s repeat %d: %6.3f Mpps (received %.3f, kernel drops %.3f, offered %.3f, arrived %.3f, forwarded %.3f; cpu busy gen %.0f%% dp %.0f%%) %s %s/%s",
					cases[i], r, s.Rate, s.Received, s.KernelDrops, s.Offered, s.Arrived, s.Forwarded, 100*s.GenBusy, 100*s.DPBusy, s.NAPIThread, s.Attach, s.Bind)
			}
			crs[i].Samples = append(crs[i].Samples, s)
		}
	}
	for i := range crs {
		summarize(&crs[i])
	}
	return crs, nil
}

func (o Options) newPeer(c Case, dir string, r int) peer {
	dpns := lab.DPNS(o.Prefix)
	switch c.Peer {
	case PeerTestpmd:
		return &testpmd{bin: o.Testpmd, ns: dpns, cpus: [2]int{o.GenCPU, o.DPCPU}, prefix: fmt.Sprintf("%s-tp%d-%d", o.Prefix, os.Getpid(), r)}
	case PeerNftables:
		return &nftRouter{ns: dpns}
	case PeerBefore:
		return &warpflowd{bin: o.Before, dir: dir, ns: dpns, cpu: o.DPCPU, rings: o.Rings}
	}
	return &warpflowd{bin: o.Warpflowd, dir: dir, ns: dpns, cpu: o.DPCPU, rings: o.Rings}
}

// settle is the pause after a peer stopped, for the kernel to release its
// queue and NAPI.
const settle = 300 * time.Millisecond

// measure runs one sample of c.
func (o Options) measure(ctx context.Context, c Case, r int, dir string) (s Sample) {
	s.Repeat = r
	fail := func(err error) Sample {
		s.Err = err.Error()
		return s
	}
	mode, _ := ParseMode(c.Mode)
	dpns, genns := lab.DPNS(o.Prefix), lab.GenNS(o.Prefix)
	var before map[int]string
	if c.Setup == SetupThreaded {
		var err error
		if before, err = napiThreads(lab.DP0Iface); err != nil {
			return fail(err)
		}
	}
	sinkns := lab.SinkNS(o.Prefix)
	if mode == Stateful {
		// The sink counts and drops what the router forwards, in place of
		// the lab's pass program (stateful.go).
		if err := sinkDrop(sinkns, true); err != nil {
			return fail(err)
		}
		defer func() {
			if err := sinkDrop(sinkns, false); err != nil && s.Err == "" {
				s.Err = err.Error()
			}
		}()
	}
	p := o.newPeer(c, dir, r)
	defer func() {
		rep, err := p.stop()
		s.Report = rep
		if err != nil && s.Err == "" {
			s.Err = err.Error()
		}
		// Leave dp0 bare for the next case whatever happened.
		if left, err := detachXDP(dpns, lab.DP0Iface); err != nil || left {
			o.logf("%s: %s had an XDP program left after the peer stopped (detached: %v)", c, lab.DP0Iface, err == nil)
		}
		time.Sleep(settle)
	}()
	// The kernel releases the previous peer's queue in deferred work: a
	// bind right after can be refused. One retry after a pause.
	if err := p.start(ctx, mode); err != nil {
		o.logf("%s: start failed, retrying in 1s: %v", c, err)
		p.stop()
		detachXDP(dpns, lab.DP0Iface)
		time.Sleep(time.Second)
		p = o.newPeer(c, dir, r)
		if err := p.start(ctx, mode); err != nil {
			return fail(err)
		}
	}
	s.Bind = p.granted()
	var err error
	if s.Attach, err = xdpAttachMode(dpns, lab.DP0Iface); err != nil {
		return fail(err)
	}
	if c.Setup == SetupThreaded {
		name, err := o.pinNAPI(before)
		if err != nil {
			return fail(err)
		}
		s.NAPIThread = name
	}

	// The generator, bounded by count and time.
	g := gen.DefaultOptions()
	g.Netns, g.Interface = genns, lab.GenIface
	g.Flows, g.SrcPort = o.Flows, 1024
	g.Duration = o.Warmup + o.Window + 2*time.Second
	g.Rate = o.FloodRate
	if c.Load == LoadControlled {
		g.Rate, g.Burst = o.ControlledRate, o.ControlledBurst
	}
	if mode == Stateful {
		g.Engine = gen.EngineAFXDP // the live engine's frames do not survive the kernel router (stateful.go)
	}
	g.Count = 1 << 36
	if g.Rate > 0 {
		g.Count = uint64(g.Rate * g.Duration.Seconds())
	}
	gctx, stopGen := context.WithCancel(ctx)
	defer stopGen()
	type genDone struct {
		res gen.Result
		err error
	}
	gdone := make(chan genDone, 1)
	go func() {
		res, err := gen.Run(gctx, g)
		gdone <- genDone{res, err}
	}()
	waitGen := func() genDone {
		stopGen()
		return <-gdone
	}
	sleep := func(d time.Duration) error {
		select {
		case <-time.After(d):
			return nil
		case d := <-gdone:
			gdone <- d
			if d.err != nil {
				return fmt.Errorf("generator: %w", d.err)
			}
			return fmt.Errorf("generator stopped early (%s)", d.res.Stopped)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	var cpu0, cpu1 [2]cpuTimes
	var sk [2]ifaceCounters // stateful: sink0's at the start and the end
	var ip [2]ipCounters    // stateful: the dataplane namespace's IP counters
	read := func() (dp, gn ifaceCounters, at time.Time, err error) {
		cpu0[1], cpu1[1] = cpu0[0], cpu1[0]
		if cpu0[0], err = readCPU(o.GenCPU); err != nil {
			return
		}
		if cpu1[0], err = readCPU(o.DPCPU); err != nil {
			return
		}
		at = time.Now()
		if dp, err = readCounters(dpns, lab.DP0Iface); err != nil {
			return
		}
		if gn, err = readCounters(genns, lab.GenIface); err != nil || mode != Stateful {
			return
		}
		sk[0], ip[0] = sk[1], ip[1]
		if sk[1], err = readCounters(sinkns, lab.SinkIface); err != nil {
			return
		}
		ip[1], err = readIPCounters(dpns)
		return
	}
	if err := sleep(o.Warmup); err != nil {
		waitGen()
		return fail(err)
	}
	dp0, gn0, t0, err := read()
	if err != nil {
		waitGen()
		return fail(err)
	}
	if err := sleep(o.Window); err != nil {
		waitGen()
		return fail(err)
	}
	dp1, gn1, t1, err := read()
	gd := waitGen()
	if err != nil {
		return fail(err)
	}
	if gd.err != nil {
		return fail(fmt.Errorf("generator: %w", gd.err))
	}
	busy := func(c [2]cpuTimes) float64 { // [0]: end, [1]: start
		if c[0].total == c[1].total {
			return 0
		}
		return float64(c[0].busy-c[1].busy) / float64(c[0].total-c[1].total)
	}
	s.GenBusy, s.DPBusy = busy(cpu0), busy(cpu1)
	sec := t1.Sub(t0).Seconds()
	s.Seconds = sec
	rate := func(a, b uint64) float64 { return float64(b-a) / sec / 1e6 }
	eth := func(c0, c1 ifaceCounters, k string) float64 {
		return rate(c0.Ethtool[k], c1.Ethtool[k])
	}
	s.Received = eth(dp0, dp1, "rx_queue_0_xdp_redirect")
	s.KernelDrops = eth(dp0, dp1, "rx_queue_0_drops")
	s.Arrived = eth(dp0, dp1, "rx_queue_0_xdp_packets")
	s.Offered = eth(gn0, gn1, "tx_queue_0_xdp_xmit") + eth(gn0, gn1, "tx_queue_0_xdp_xmit_errors")
	s.Forwarded = eth(gn0, gn1, "rx_queue_0_xdp_packets")
	s.DP0TX = rate(dp0.TXPackets, dp1.TXPackets)
	s.GenMpps = gd.res.PPS / 1e6
	s.Rate = s.Received
	switch mode {
	case MacSwap:
		s.Rate = s.Forwarded
	case Stateful:
		s.Delivered = eth(sk[0], sk[1], "rx_queue_0_xdp_packets")
		// The AF_XDP engine's frames leave by gen0's transmit path, not
		// XDP_TX: offered is gen0's tx_packets (a frame dp0's ring refused
		// holds the sender back rather than counting as an error).
		s.Offered = rate(gn0.TXPackets, gn1.TXPackets)
		s.IPIn, s.IPForwarded = rate(ip[0].InReceives, ip[1].InReceives), rate(ip[0].ForwDatagrams, ip[1].ForwDatagrams)
		s.Rate = s.Delivered
	}
	return s
}

// pinNAPI finds the NAPI thread of dp0 that appeared since before (the
// one the peer's program made) and pins it to the dataplane's CPU.
func (o Options) pinNAPI(before map[int]string) (string, error) {
	deadline := time.Now().Add(2 * time.Second)
	for {
		now, err := napiThreads(lab.DP0Iface)
		if err != nil {
			return "", err
		}
		var fresh []int
		for pid := range now {
			if _, ok := before[pid]; !ok {
				fresh = append(fresh, pid)
			}
		}
		sort.Ints(fresh)
		switch {
		case len(fresh) == 1:
			pid := fresh[0]
			if err := cpuaffinity.PinTask(pid, o.DPCPU); err != nil {
				return "", err
			}
			cpus, err := cpuaffinity.TaskCPUs(pid)
			if err != nil {
				return "", err
			}
			if !slices.Equal(cpus, []int{o.DPCPU}) {
				return "", fmt.Errorf("napi thread %s (pid %d) runs on cpus %v after pinning to %d", now[pid], pid, cpus, o.DPCPU)
			}
			return fmt.Sprintf("%s (pid %d) on cpu %d", now[pid], pid, o.DPCPU), nil
		case len(fresh) > 1:
			return "", fmt.Errorf("%d new napi/%s threads (another lab started at the same time?): %v", len(fresh), lab.DP0Iface, fresh)
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("no new napi/%s thread after the peer attached (is the lab's NAPI threaded?)", lab.DP0Iface)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// summarize fills a case's spread from its good samples.
func summarize(cr *CaseResult) {
	var rates, offered, busy []float64
	for _, s := range cr.Samples {
		if s.Err != "" {
			cr.Errors++
			continue
		}
		rates = append(rates, s.Rate)
		offered = append(offered, s.Offered)
		busy = append(busy, s.DPBusy)
		if cr.Attach == "" {
			cr.Attach, cr.Bind = s.Attach, s.Bind
		} else if cr.Attach != s.Attach || cr.Bind != s.Bind {
			cr.Attach, cr.Bind = cr.Attach+","+s.Attach, cr.Bind+","+s.Bind
		}
	}
	if len(rates) == 0 {
		return
	}
	cr.Min, cr.Median, cr.Max = spread(rates)
	_, cr.OfferedMedian, _ = spread(offered)
	_, cr.DPBusyMedian, _ = spread(busy)
}

// spread returns the minimum, median and maximum of v (not empty).
func spread(v []float64) (lo, med, hi float64) {
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	med = s[n/2]
	if n%2 == 0 {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	return s[0], med, s[n-1]
}

// find returns the case result matching the fields, or nil.
func find(crs []CaseResult, setup, load, mode, peer string) *CaseResult {
	for i := range crs {
		c := crs[i].Case
		if c.Setup == setup && c.Load == load && c.Mode == mode && c.Peer == peer && len(crs[i].Samples) > crs[i].Errors {
			return &crs[i]
		}
	}
	return nil
}

// judge computes the targets (and the stateful mode's comparison with the
// kernel router, which has none):
//   - setup A, per mode: warpflow >= 1.5x testpmd (medians; the range is
//     over the repeats' own pairs);
//   - setup B, per mode and peer: the flood's median >= 0.7x the best
//     controlled-load sample (warpflow's is the target; the other peers'
//     are references).
func judge(crs []CaseResult) []Target {
	var ts []Target
	for _, setup := range []string{SetupDefault, SetupThreaded} {
		for _, load := range []string{LoadControlled, LoadFlood} {
			wf, nf := find(crs, setup, load, "stateful", PeerWarpflow), find(crs, setup, load, "stateful", PeerNftables)
			if wf == nil || nf == nil || nf.Median <= 0 {
				continue
			}
			// No target (Want 0): the issue asks for both rates at the same
			// offered load, not for a ratio.
			t := Target{Name: fmt.Sprintf("%s %s stateful: warpflow / nftables", setup, load), Ratio: wf.Median / nf.Median,
				Note: "comparison, no target"}
			t.Low, t.High = pairRange(wf.Samples, nf.Samples, func(a, b Sample) float64 { return a.Rate / b.Rate })
			ts = append(ts, t)
		}
	}
	for _, mode := range []string{"rxonly", "macswap"} {
		wf, tp := find(crs, SetupDefault, LoadFlood, mode, PeerWarpflow), find(crs, SetupDefault, LoadFlood, mode, PeerTestpmd)
		if wf != nil && tp != nil && tp.Median > 0 {
			t := Target{Name: fmt.Sprintf("A %s: warpflow / testpmd", mode), Want: 1.5, Ratio: wf.Median / tp.Median}
			t.Low, t.High = pairRange(wf.Samples, tp.Samples, func(a, b Sample) float64 { return a.Rate / b.Rate })
			t.Met = t.Ratio >= t.Want
			ts = append(ts, t)
		}
		for _, peer := range []string{PeerWarpflow, PeerTestpmd, PeerBefore} {
			ctl, fl := find(crs, SetupThreaded, LoadControlled, mode, peer), find(crs, SetupThreaded, LoadFlood, mode, peer)
			if ctl == nil || fl == nil || ctl.Max <= 0 {
				continue
			}
			t := Target{Name: fmt.Sprintf("B %s: %s flood / its best controlled", mode, peer), Want: 0.7, Ratio: fl.Median / ctl.Max,
				Low: fl.Min / ctl.Max, High: fl.Max / ctl.Max}
			t.Met = t.Ratio >= t.Want
			if peer != PeerWarpflow {
				t.Note = "reference (the issue's target is warpflow's)"
			}
			ts = append(ts, t)
		}
	}
	return ts
}

// pairRange is the range of f over the repeats both cases measured.
func pairRange(a, b []Sample, f func(a, b Sample) float64) (lo, hi float64) {
	first := true
	for _, x := range a {
		for _, y := range b {
			if x.Repeat != y.Repeat || x.Err != "" || y.Err != "" || y.Rate == 0 {
				continue
			}
			v := f(x, y)
			if first || v < lo {
				lo = v
			}
			if first || v > hi {
				hi = v
			}
			first = false
		}
	}
	return lo, hi
}
