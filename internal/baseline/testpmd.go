package baseline

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ErrTestpmdUnavailable reports that the DPDK baseline cannot run here:
// dpdk-testpmd (or stdbuf) is not installed, or the process is not root.
var ErrTestpmdUnavailable = errors.New("dpdk-testpmd unavailable")

// TestpmdInstallHint names the Debian 12 packages that provide the
// baseline: dpdk-testpmd ships in dpdk-dev, the capture and sink drivers in
// the two PMD packages.
const TestpmdInstallHint = "apt-get install -y dpdk-dev librte-net-pcap23 librte-net-null23"

// TestpmdOptions configures one testpmd replay.
type TestpmdOptions struct {
	// Binary is the testpmd executable, looked up in PATH.
	Binary string
	// Capture is the classic pcap file replayed; it must not contain ','
	// (it is passed inside a DPDK devargs string).
	Capture string
	// Duration is how long packets are forwarded.
	Duration time.Duration
	// MainCore runs testpmd's control loop; ForwardCore busy-polls the
	// ports. They must differ.
	MainCore, ForwardCore int
	// MemoryMB is the EAL memory (-m), taken from ordinary pages.
	MemoryMB int
	// Mbufs is the mbuf pool size. The pcap driver holds the whole capture
	// in mbufs when replaying it endlessly, so 0 means the capture's packet
	// count plus 8192.
	Mbufs int
	// StartTimeout bounds EAL and port initialisation.
	StartTimeout time.Duration
	// Output, when set, receives a copy of testpmd's stdout and stderr.
	Output io.Writer
	// Mode is testpmd's forwarding mode: ForwardMacswap (swap the MACs of
	// every packet, so each header is read and written) or ForwardIO
	// (forward the mbufs without touching a byte).
	Mode string
}

// Forwarding modes Testpmd runs.
const (
	ForwardMacswap = "macswap"
	ForwardIO      = "io"
)

// DefaultTestpmdOptions returns a 5-second macswap replay of no capture on
// cores 0 and 1 with 256 MiB of memory.
func DefaultTestpmdOptions() TestpmdOptions {
	return TestpmdOptions{
		Binary:       "dpdk-testpmd",
		Duration:     5 * time.Second,
		MainCore:     0,
		ForwardCore:  1,
		MemoryMB:     256,
		StartTimeout: time.Minute,
		Mode:         ForwardMacswap,
	}
}

func (o TestpmdOptions) validate() error {
	switch {
	case o.Binary == "":
		return errors.New("testpmd options: empty binary")
	case o.Capture == "":
		return errors.New("testpmd options: no capture")
	case strings.ContainsAny(o.Capture, ",="):
		return fmt.Errorf("testpmd options: capture path %q contains ',' or '='", o.Capture)
	case o.Duration <= 0:
		return fmt.Errorf("testpmd options: duration %v, want > 0", o.Duration)
	case o.MainCore < 0 || o.ForwardCore < 0 || o.MainCore == o.ForwardCore:
		return fmt.Errorf("testpmd options: cores %d,%d, want two distinct cores", o.MainCore, o.ForwardCore)
	case o.MemoryMB < 64:
		return fmt.Errorf("testpmd options: memory %d MiB, want at least 64", o.MemoryMB)
	case o.Mbufs < 0:
		return fmt.Errorf("testpmd options: mbufs %d, want >= 0", o.Mbufs)
	case o.StartTimeout <= 0:
		return fmt.Errorf("testpmd options: start timeout %v, want > 0", o.StartTimeout)
	case o.Mode != ForwardMacswap && o.Mode != ForwardIO:
		return fmt.Errorf("testpmd options: forward mode %q, want %q or %q", o.Mode, ForwardMacswap, ForwardIO)
	}
	return nil
}

// TestpmdArgs returns the testpmd command line for o (without the binary),
// with mbufs already resolved and prefix as the EAL file prefix:
//
//	-l <main>,<fwd> --no-huge -m <MiB> --no-pci --no-shconf --file-prefix <prefix>
//	--vdev net_pcap0,rx_pcap=<capture>,infinite_rx=1 --vdev net_null0,no-rx=1
//	-- --forward-mode=<mode> --nb-cores=1 --total-num-mbufs=<n>
//
// --no-huge because CI machines have no hugepages (and it implies legacy
// memory, which rules out --in-memory); --no-shconf and a per-run prefix
// so concurrent runs do not collide; no-rx=1 so the null port only sinks
// and the counts are the replayed stream alone.
func TestpmdArgs(o TestpmdOptions, mbufs int, prefix string) []string {
	return []string{
		"-l", fmt.Sprintf("%d,%d", o.MainCore, o.ForwardCore),
		"--no-huge", "-m", strconv.Itoa(o.MemoryMB), "--no-pci", "--no-shconf", "--file-prefix", prefix,
		"--vdev", "net_pcap0,rx_pcap=" + o.Capture + ",infinite_rx=1",
		"--vdev", "net_null0,no-rx=1",
		"--", "--forward-mode=" + o.Mode, "--nb-cores=1", "--total-num-mbufs=" + strconv.Itoa(mbufs),
	}
}

// Testpmd replays opts.Capture with dpdk-testpmd from memory and reports
// its forwarding rate. It runs, as root,
//
//	stdbuf -oL dpdk-testpmd <TestpmdArgs>
//
// The pcap driver loads the capture into mbufs and, with infinite_rx=1,
// replays it endlessly; one forwarding core swaps MACs (macswap mode; io
// mode leaves the bytes alone) and transmits each burst to the null
// driver, which frees it. Without -i or --stats-period,
// testpmd starts forwarding, prints "Press enter to exit" and waits on
// stdin (stdbuf makes that line arrive at once instead of at exit). The
// timed region runs from that line until Testpmd writes the newline after
// opts.Duration; testpmd then stops and prints its accumulated forward
// statistics, whose RX-packets over the timed region is the rate.
//
// Cancelling ctx interrupts testpmd.
func Testpmd(ctx context.Context, opts TestpmdOptions) (Result, error) {
	if err := opts.validate(); err != nil {
		return Result{}, err
	}
	bin, err := exec.LookPath(opts.Binary)
	if err != nil {
		return Result{}, fmt.Errorf("%w: %s not found (install with %q): %w", ErrTestpmdUnavailable, opts.Binary, TestpmdInstallHint, err)
	}
	stdbuf, err := exec.LookPath("stdbuf")
	if err != nil {
		return Result{}, fmt.Errorf("%w: stdbuf (coreutils) not found: %w", ErrTestpmdUnavailable, err)
	}
	if os.Geteuid() != 0 {
		return Result{}, fmt.Errorf("%w: needs root for the DPDK EAL", ErrTestpmdUnavailable)
	}
	capture, err := filepath.Abs(opts.Capture)
	if err != nil {
		return Result{}, fmt.Errorf("testpmd capture: %w", err)
	}
	opts.Capture = capture
	mbufs := opts.Mbufs
	if mbufs == 0 {
		n, err := countPackets(capture)
		if err != nil {
			return Result{}, err
		}
		mbufs = n + 8192
	}
	prefix := fmt.Sprintf("warpflow-baseline-%d-%d", os.Getpid(), time.Now().UnixNano())
	defer removeRuntimeDir(prefix)
	args := append([]string{"-oL", bin}, TestpmdArgs(opts, mbufs, prefix)...)
	return runTestpmd(ctx, stdbuf, args, opts)
}

// countPackets counts the records of a capture.
func countPackets(path string) (int, error) {
	_, r, err := loadCapture(path)
	if err != nil {
		return 0, err
	}
	n := 0
	for {
		_, _, err := r.ZeroCopyReadPacketData()
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return 0, fmt.Errorf("%s packet %d: %w", path, n, err)
		}
		n++
	}
}

// removeRuntimeDir removes the empty directory the EAL leaves under
// /var/run/dpdk for a file prefix, even with --no-shconf.
func removeRuntimeDir(prefix string) {
	_ = os.Remove(filepath.Join("/var/run/dpdk", prefix))
}

// readyLine is printed once forwarding has started.
const readyLine = "Press enter to exit"

func runTestpmd(ctx context.Context, name string, args []string, opts TestpmdOptions) (Result, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 10 * time.Second
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return Result{}, fmt.Errorf("testpmd stdin: %w", err)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return Result{}, fmt.Errorf("testpmd output pipe: %w", err)
	}
	defer pr.Close()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		pw.Close()
		return Result{}, fmt.Errorf("start testpmd: %w", err)
	}
	pw.Close()

	out := &lockedBuffer{}
	ready := make(chan time.Time, 1)
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Text()
			out.WriteLine(line)
			if opts.Output != nil {
				fmt.Fprintln(opts.Output, line)
			}
			if strings.Contains(line, readyLine) {
				select {
				case ready <- time.Now():
				default:
				}
			}
		}
	}()
	waitErr := make(chan error, 1)
	go func() {
		<-readDone // all output read before Wait closes anything
		waitErr <- cmd.Wait()
	}()

	var start time.Time
	startTimer := time.NewTimer(opts.StartTimeout)
	defer startTimer.Stop()
	select {
	case start = <-ready:
	case err := <-waitErr:
		return Result{}, fmt.Errorf("testpmd exited before forwarding: %w\n%s", err, out.Tail(20))
	case <-startTimer.C:
		_ = cmd.Process.Kill()
		<-waitErr
		return Result{}, fmt.Errorf("testpmd did not start forwarding within %v\n%s", opts.StartTimeout, out.Tail(20))
	case <-ctx.Done():
		<-waitErr
		return Result{}, fmt.Errorf("testpmd: %w", ctx.Err())
	}

	runTimer := time.NewTimer(opts.Duration)
	defer runTimer.Stop()
	select {
	case <-runTimer.C:
	case err := <-waitErr:
		return Result{}, fmt.Errorf("testpmd exited while forwarding: %w\n%s", err, out.Tail(20))
	case <-ctx.Done():
		<-waitErr
		return Result{}, fmt.Errorf("testpmd: %w", ctx.Err())
	}
	_, werr := io.WriteString(stdin, "\n")
	elapsed := time.Since(start)
	stdin.Close()
	if werr != nil {
		return Result{}, fmt.Errorf("stop testpmd: %w", werr)
	}
	if err := <-waitErr; err != nil {
		return Result{}, fmt.Errorf("testpmd: %w\n%s", err, out.Tail(20))
	}
	rx, tx, err := parseForwardStats(out.String())
	if err != nil {
		return Result{}, fmt.Errorf("testpmd output: %w\n%s", err, out.Tail(20))
	}
	if m := parseForwardMode(out.String()); m != opts.Mode {
		return Result{}, fmt.Errorf("testpmd forwarded in mode %q, asked for %q", m, opts.Mode)
	}
	r := newResult(rx, elapsed)
	r.RXPackets, r.TXPackets = rx, tx
	return r, nil
}

var (
	accumulatedRE = regexp.MustCompile(`Accumulated forward statistics for all ports`)
	rxPacketsRE   = regexp.MustCompile(`RX-packets:\s+(\d+)`)
	txPacketsRE   = regexp.MustCompile(`TX-packets:\s+(\d+)`)
)

// forwardModeRE matches the line testpmd prints when forwarding starts:
// "io packet forwarding - ports=2 - cores=1 - streams=2 - ...".
var forwardModeRE = regexp.MustCompile(`(?m)^\s*(\S+) packet forwarding - ports=`)

// parseForwardMode returns the forwarding mode testpmd reports it started
// in, "" when the output does not say.
func parseForwardMode(out string) string {
	if m := forwardModeRE.FindStringSubmatch(out); m != nil {
		return m[1]
	}
	return ""
}

// parseForwardStats extracts RX-packets and TX-packets from the
// "Accumulated forward statistics for all ports" block testpmd prints when
// forwarding stops.
func parseForwardStats(out string) (rx, tx uint64, err error) {
	loc := accumulatedRE.FindStringIndex(out)
	if loc == nil {
		return 0, 0, errors.New("no accumulated forward statistics")
	}
	block := out[loc[1]:]
	rxm, txm := rxPacketsRE.FindStringSubmatch(block), txPacketsRE.FindStringSubmatch(block)
	if rxm == nil || txm == nil {
		return 0, 0, errors.New("accumulated forward statistics without RX-packets/TX-packets")
	}
	if rx, err = strconv.ParseUint(rxm[1], 10, 64); err != nil {
		return 0, 0, fmt.Errorf("rx-packets: %w", err)
	}
	if tx, err = strconv.ParseUint(txm[1], 10, 64); err != nil {
		return 0, 0, fmt.Errorf("tx-packets: %w", err)
	}
	return rx, tx, nil
}

// lockedBuffer collects output lines from the reader goroutine.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) WriteLine(s string) {
	b.mu.Lock()
	b.buf.WriteString(s)
	b.buf.WriteByte('\n')
	b.mu.Unlock()
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Tail returns the last n lines, for error messages.
func (b *lockedBuffer) Tail(n int) string {
	lines := strings.Split(strings.TrimRight(b.String(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
