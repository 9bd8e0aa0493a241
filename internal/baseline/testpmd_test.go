package baseline

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// sampleStop is testpmd 22.11's output when forwarding stops, trimmed.
const sampleStop = `Press enter to exit
Telling cores to stop...
Waiting for lcores to finish...

  ---------------------- Forward statistics for port 0  ----------------------
  RX-packets: 13066944       RX-dropped: 0             RX-total: 13066944
  TX-packets: 0              TX-dropped: 0             TX-total: 0
  ----------------------------------------------------------------------------

  ---------------------- Forward statistics for port 1  ----------------------
  RX-packets: 0              RX-dropped: 0             RX-total: 0
  TX-packets: 13066912       TX-dropped: 32            TX-total: 13066944
  ----------------------------------------------------------------------------

  +++++++++++++++ Accumulated forward statistics for all ports+++++++++++++++
  RX-packets: 13066944       RX-dropped: 0             RX-total: 13066944
  TX-packets: 13066912       TX-dropped: 32            TX-total: 13066944
  ++++++++++++++++++++++++++++++++++++++++++++++++++++++++++++++++++++++++++++

Done.
`

func TestParseForwardStats(t *testing.T) {
	tests := []struct {
		name    string
		out     string
		rx, tx  uint64
		wantErr bool
	}{
		{"stop", sampleStop, 13066944, 13066912, false},
		{"no block", "Press enter to exit\nEAL: Error\n", 0, 0, true},
		{"port blocks only", sampleStop[:strings.Index(sampleStop, "  +++")], 0, 0, true},
		{"block cut", sampleStop[:strings.Index(sampleStop, "all ports")+len("all ports+++")], 0, 0, true},
		{"overflow", "Accumulated forward statistics for all ports\n RX-packets: 99999999999999999999999 TX-packets: 1\n", 0, 0, true},
	}
	for _, tt := range tests {
		rx, tx, err := parseForwardStats(tt.out)
		if (err != nil) != tt.wantErr || rx != tt.rx || tx != tt.tx {
			t.Errorf("%s: got %d, %d, %v; want %d, %d, error %v", tt.name, rx, tx, err, tt.rx, tt.tx, tt.wantErr)
		}
	}
}

func TestParseForwardMode(t *testing.T) {
	tests := map[string]string{
		"Set io packet forwarding mode\nio packet forwarding - ports=2 - cores=1 - streams=2 - NUMA support enabled\n  io packet forwarding packets/burst=32\n": "io",
		"macswap packet forwarding - ports=2 - cores=1\n": "macswap",
		"Set macswap packet forwarding mode\n":            "",
		"EAL: Error\n":                                    "",
	}
	for out, want := range tests {
		if got := parseForwardMode(out); got != want {
			t.Errorf("parseForwardMode(%q) = %q, want %q", out, got, want)
		}
	}
}

func TestTestpmdOptionsValidate(t *testing.T) {
	ok := DefaultTestpmdOptions()
	ok.Capture = "x.pcap"
	if err := ok.validate(); err != nil {
		t.Fatalf("valid options rejected: %v", err)
	}
	tests := map[string]func(*TestpmdOptions){
		"no capture":     func(o *TestpmdOptions) { o.Capture = "" },
		"comma":          func(o *TestpmdOptions) { o.Capture = "a,b.pcap" },
		"zero duration":  func(o *TestpmdOptions) { o.Duration = 0 },
		"same cores":     func(o *TestpmdOptions) { o.ForwardCore = o.MainCore },
		"negative core":  func(o *TestpmdOptions) { o.MainCore = -1 },
		"little memory":  func(o *TestpmdOptions) { o.MemoryMB = 16 },
		"negative mbufs": func(o *TestpmdOptions) { o.Mbufs = -1 },
		"no binary":      func(o *TestpmdOptions) { o.Binary = "" },
		"no start time":  func(o *TestpmdOptions) { o.StartTimeout = 0 },
		"no mode":        func(o *TestpmdOptions) { o.Mode = "" },
		"unknown mode":   func(o *TestpmdOptions) { o.Mode = "rxonly" },
	}
	for name, mutate := range tests {
		o := ok
		mutate(&o)
		if err := o.validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestTestpmdArgs: the command line carries the cores, the capture in the
// pcap vdev, the null sink and the forwarding mode asked for, in both
// modes the bench runs.
func TestTestpmdArgs(t *testing.T) {
	for _, mode := range []string{ForwardMacswap, ForwardIO} {
		o := DefaultTestpmdOptions()
		o.Capture, o.MainCore, o.ForwardCore, o.MemoryMB, o.Mode = "/tmp/b.pcap", 3, 7, 128, mode
		if err := o.validate(); err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		got := strings.Join(TestpmdArgs(o, 12288, "pfx"), " ")
		want := "-l 3,7 --no-huge -m 128 --no-pci --no-shconf --file-prefix pfx" +
			" --vdev net_pcap0,rx_pcap=/tmp/b.pcap,infinite_rx=1 --vdev net_null0,no-rx=1" +
			" -- --forward-mode=" + mode + " --nb-cores=1 --total-num-mbufs=12288"
		if got != want {
			t.Errorf("%s:\n got %s\nwant %s", mode, got, want)
		}
	}
	if m := DefaultTestpmdOptions().Mode; m != ForwardMacswap {
		t.Errorf("default mode %q, want macswap", m)
	}
}

func TestTestpmdMissingBinary(t *testing.T) {
	o := DefaultTestpmdOptions()
	o.Binary = "dpdk-testpmd-does-not-exist"
	o.Capture = filepath.Join(captures, "bench-64.pcap")
	_, err := Testpmd(context.Background(), o)
	if !errors.Is(err, ErrTestpmdUnavailable) || !strings.Contains(err.Error(), "dpdk-dev") {
		t.Errorf("error %v, want ErrTestpmdUnavailable with the install hint", err)
	}
}

// TestTestpmdReplay runs a 2-second replay of bench-64.pcap in each
// forwarding mode. It needs root
// and dpdk-testpmd; without them it skips, except under CI=true, where the
// baseline must be available.
func TestTestpmdReplay(t *testing.T) {
	for _, mode := range []string{ForwardMacswap, ForwardIO} {
		t.Run(mode, func(t *testing.T) { testTestpmdReplay(t, mode) })
	}
}

func testTestpmdReplay(t *testing.T, mode string) {
	o := DefaultTestpmdOptions()
	o.Capture = filepath.Join(captures, "bench-64.pcap")
	o.Duration = 2 * time.Second
	o.Mode = mode
	if testing.Verbose() {
		o.Output = testWriter{t}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, err := Testpmd(ctx, o)
	if errors.Is(err, ErrTestpmdUnavailable) {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true requires the testpmd baseline: %v", err)
		}
		t.Skipf("testpmd baseline unavailable: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("testpmd %s: %d rx, %d tx in %v: %.2f Mpps (%.1f ns/pkt)", mode, r.RXPackets, r.TXPackets, r.Elapsed, r.Mpps, r.NsPerPacket)
	if r.Mpps <= 0 || r.Packets == 0 || r.Packets != r.RXPackets {
		t.Errorf("no rate: %+v", r)
	}
	if r.Elapsed < o.Duration {
		t.Errorf("elapsed %v shorter than the %v asked for", r.Elapsed, o.Duration)
	}
	// Every received burst is transmitted to the null port; at most one
	// burst (32) can be in flight when forwarding stops.
	if d := int64(r.RXPackets) - int64(r.TXPackets); d < 0 || d > 32 {
		t.Errorf("rx %d and tx %d differ by %d, want within one burst", r.RXPackets, r.TXPackets, d)
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
