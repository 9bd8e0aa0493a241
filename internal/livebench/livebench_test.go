package livebench

import (
	"slices"
	"strings"
	"testing"
)

func TestParseEthtoolStats(t *testing.T) {
	out := "NIC statistics:\n     peer_ifindex: 2\n     rx_queue_0_xdp_packets: 6006112\n     rx_queue_0_drops: 4373296\n     rx_queue_0_xdp_redirect: 1632816\n"
	m, err := parseEthtoolStats(out)
	if err != nil {
		t.Fatal(err)
	}
	if m["rx_queue_0_xdp_redirect"] != 1632816 || m["rx_queue_0_drops"] != 4373296 || m["peer_ifindex"] != 2 || len(m) != 4 {
		t.Fatalf("parsed %v", m)
	}
	for _, bad := range []string{"", "NIC statistics:\n", "NIC statistics:\n  x: y\n", "NIC statistics:\n  no colon\n"} {
		if _, err := parseEthtoolStats(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestSpread(t *testing.T) {
	for _, c := range []struct {
		v           []float64
		lo, med, hi float64
	}{
		{[]float64{3}, 3, 3, 3},
		{[]float64{5, 1, 3}, 1, 3, 5},
		{[]float64{4, 1, 3, 2}, 1, 2.5, 4},
	} {
		lo, med, hi := spread(c.v)
		if lo != c.lo || med != c.med || hi != c.hi {
			t.Errorf("spread(%v) = %g %g %g, want %g %g %g", c.v, lo, med, hi, c.lo, c.med, c.hi)
		}
	}
}

// results builds case results from rates per repeat.
func results(rates map[Case][]float64) []CaseResult {
	var crs []CaseResult
	for c, rs := range rates {
		cr := CaseResult{Case: c}
		for i, r := range rs {
			cr.Samples = append(cr.Samples, Sample{Repeat: i, Rate: r, Attach: "native", Bind: "copy"})
		}
		summarize(&cr)
		crs = append(crs, cr)
	}
	return crs
}

func TestJudge(t *testing.T) {
	c := func(setup, load, mode, peer string) Case {
		return Case{Setup: setup, Load: load, Mode: mode, Peer: peer}
	}
	crs := results(map[Case][]float64{
		c("A", LoadFlood, "rxonly", PeerWarpflow):       {4.5, 4.2, 4.4},
		c("A", LoadFlood, "rxonly", PeerTestpmd):        {2.8, 3.0, 2.9},
		c("A", LoadFlood, "macswap", PeerWarpflow):      {1.0, 1.1, 1.2},
		c("A", LoadFlood, "macswap", PeerTestpmd):       {1.0, 1.0, 1.0},
		c("B", LoadControlled, "rxonly", PeerWarpflow):  {0.9, 1.0, 0.95},
		c("B", LoadFlood, "rxonly", PeerWarpflow):       {0.8, 0.6, 0.75},
		c("B", LoadControlled, "rxonly", PeerTestpmd):   {1.0, 1.0, 1.0},
		c("B", LoadFlood, "rxonly", PeerTestpmd):        {0.2, 0.2, 0.2},
		c("B", LoadControlled, "macswap", PeerWarpflow): {0.5},
		c("B", LoadFlood, "macswap", PeerBefore):        {0.1}, // no controlled twin: no target
	})
	got := map[string]Target{}
	for _, tg := range judge(crs) {
		got[tg.Name] = tg
	}
	check := func(name string, ratio, lo, hi float64, met bool) {
		t.Helper()
		tg, ok := got[name]
		if !ok {
			t.Fatalf("no target %q in %v", name, got)
		}
		near := func(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }
		if !near(tg.Ratio, ratio) || !near(tg.Low, lo) || !near(tg.High, hi) || tg.Met != met {
			t.Errorf("%s: %+v, want ratio %g range %g..%g met %v", name, tg, ratio, lo, hi, met)
		}
	}
	check("A rxonly: warpflow / testpmd", 4.4/2.9, 4.2/3.0, 4.5/2.8, true)
	check("A macswap: warpflow / testpmd", 1.1, 1.0, 1.2, false)
	check("B rxonly: warpflow flood / its best controlled", 0.75, 0.6, 0.8, true)
	check("B rxonly: testpmd flood / its best controlled", 0.2, 0.2, 0.2, false)
	if len(got) != 4 {
		t.Errorf("targets %v: want 4 (no target without both loads)", got)
	}
	if got["B rxonly: testpmd flood / its best controlled"].Note == "" || got["B rxonly: warpflow flood / its best controlled"].Note != "" {
		t.Error("only the non-warpflow targets are references")
	}

	// The chart's target marks: 1.5x testpmd's median in setup A, 0.7x
	// warpflow's best controlled sample for its flood in setup B.
	for _, cr := range crs {
		want := 0.0
		switch cr.Case {
		case c("A", LoadFlood, "rxonly", PeerWarpflow):
			want = 1.5 * 2.9
		case c("A", LoadFlood, "macswap", PeerWarpflow):
			want = 1.5
		case c("B", LoadFlood, "rxonly", PeerWarpflow):
			want = 0.7
		}
		if got := TargetRate(crs, cr); got-want > 1e-9 || want-got > 1e-9 {
			t.Errorf("%s: target %g, want %g", cr.Case, got, want)
		}
	}
}

func TestOptionsValidate(t *testing.T) {
	if err := DefaultOptions().validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	o := DefaultOptions()
	o.Setups = []string{"C"}
	o.Repeats = 0
	o.GenCPU, o.DPCPU = 1, 1
	o.Window = 0
	o.Rings.Fill = 100
	err := o.validate()
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{`setup "C"`, "repeats 0", "two distinct CPUs", "window 0s", "powers of two"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

func TestTestpmdArgs(t *testing.T) {
	got := strings.Join(testpmdArgs("/usr/local/bin/dpdk-testpmd", "lb-dp", [2]int{0, 1}, "pfx", MacSwap), " ")
	want := "--net=/run/netns/lb-dp stdbuf -oL /usr/local/bin/dpdk-testpmd -l 0,1 --no-huge -m 1024 --no-pci --no-shconf --file-prefix pfx --vdev net_af_xdp0,iface=dp0 -- --forward-mode=macswap --nb-cores=1"
	if got != want {
		t.Errorf("testpmd args\n got %s\nwant %s", got, want)
	}
}

// TestCasesInterleave checks the case lists: setup A floods only, setup B
// has both loads, the before binary only in B, and each repeat's rotation
// puts every case in every slot.
func TestCasesInterleave(t *testing.T) {
	o := DefaultOptions()
	o.Before = "old"
	if n := len(o.cases(SetupDefault)); n != 4 {
		t.Errorf("setup A: %d cases, want 4 (2 modes x warpflow, testpmd)", n)
	}
	cs := o.cases(SetupThreaded)
	if len(cs) != 12 {
		t.Fatalf("setup B: %d cases, want 12", len(cs))
	}
	first := map[int]bool{}
	for r := range len(cs) {
		first[(0+r)%len(cs)] = true
	}
	if len(first) != len(cs) {
		t.Errorf("rotation leaves cases out of the first slot: %v", first)
	}
}

func TestParseCPU(t *testing.T) {
	stat := "cpu  10 0 10 100 0 0 0 0 0 0\ncpu0 1 2 3 40 5 6 7 8 9 10\ncpu1 100 0 50 50 0 0 0 0 0 0\nintr 1\n"
	c, err := parseCPU(stat, 0)
	if err != nil || c.busy != 1+2+3+6+7+8 || c.total != 1+2+3+40+5+6+7+8 {
		t.Errorf("cpu0: %+v, %v", c, err)
	}
	if c, err := parseCPU(stat, 1); err != nil || c.busy != 150 || c.total != 200 {
		t.Errorf("cpu1: %+v, %v", c, err)
	}
	if _, err := parseCPU(stat, 2); err == nil {
		t.Error("cpu2: no error")
	}
}

// TestParseSNMP reads the IP counters the stateful mode records from a
// /proc/net/snmp of kernel 6.x, and refuses a mangled one.
func TestParseSNMP(t *testing.T) {
	snmp := `Ip: Forwarding DefaultTTL InReceives InHdrErrors InAddrErrors ForwDatagrams InUnknownProtos InDiscards InDelivers OutRequests OutDiscards OutNoRoutes ReasmTimeout ReasmReqds ReasmOKs ReasmFails FragOKs FragFails FragCreates OutTransmits
Ip: 1 64 383979 0 0 383970 0 0 9 383979 0 0 0 0 0 0 0 0 0 383979
Icmp: InMsgs InErrors
Icmp: 0 0
`
	c, err := parseSNMP(snmp)
	if err != nil || c.InReceives != 383979 || c.ForwDatagrams != 383970 {
		t.Fatalf("%+v, %v", c, err)
	}
	for _, bad := range []string{"", "Ip: InReceives\n", "Ip: InReceives ForwDatagrams\nIp: 1\n", "Ip: InReceives ForwDatagrams\nIp: x 2\n", "Ip: A B\nIp: 1 2\n"} {
		if c, err := parseSNMP(bad); err == nil {
			t.Errorf("%q: %+v, want an error", bad, c)
		}
	}
}

// TestStatefulCases: the stateful mode runs warpflowd beside the nftables
// router only (not testpmd, not a before-binary), and its comparison has
// no target.
func TestStatefulCases(t *testing.T) {
	o := DefaultOptions()
	o.Modes, o.Before = []Mode{Stateful}, "/bin/true"
	cs := o.cases(SetupThreaded)
	var peers []string
	for _, c := range cs {
		if c.Mode != "stateful" {
			t.Fatalf("case %v", c)
		}
		peers = append(peers, c.Load+" "+c.Peer)
	}
	if want := []string{"controlled warpflow", "controlled nftables", "flood warpflow", "flood nftables"}; !slices.Equal(peers, want) {
		t.Fatalf("cases %v, want %v", peers, want)
	}
	if m, err := ParseMode("stateful"); err != nil || m != Stateful {
		t.Fatalf("ParseMode: %v %v", m, err)
	}
	crs := []CaseResult{
		{Case: cs[2], Samples: []Sample{{Rate: 2}}, Median: 2},
		{Case: cs[3], Samples: []Sample{{Rate: 1}}, Median: 1},
	}
	ts := judge(crs)
	if len(ts) != 1 || ts[0].Want != 0 || ts[0].Ratio != 2 || TargetRate(crs, crs[0]) != 0 {
		t.Fatalf("targets %+v", ts)
	}
}
