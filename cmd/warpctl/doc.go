// Command warpctl is Warpflow's control CLI.
//
//	warpctl replay [--pipeline FILE] [--workers N] [--out DIR [--force]] [--expect DIR] [--json] [CAPTURE...]
//	warpctl validate [--json] PIPELINE.yaml...
//	warpctl bench [--capture FILE] [--cpu N] [--json FILE]
//	warpctl bench live [--setups A,B] [--modes rxonly,macswap] [--json FILE]   (root)
//	warpctl lab up|down|status|xdp-pass   (root: the netns + veth test topology)
//	warpctl gen [--count N] [--rate PPS] [--duration D] [--engine live|afxdp]   (root)
//	warpctl version
//	warpctl pipeline validate|load|swap|list|show|rm ...   (validate is offline)
//	warpctl stats [--watch] | top [--sort KEY] | ports | capture start|stop|status
//
// The commands after version drive a running warpflowd over its control
// socket (--socket, $WARPCTL_SOCKET, default /run/warpflow/warpflowd.sock)
// through internal/control/client; every read command takes --json. They
// add two exit codes: 4 daemon unreachable, 5 refused by the daemon.
//
// replay runs captures through a pipeline offline and deterministically
// (with no capture: an embedded sample through the embedded default
// pipeline), prints a per-stage table and the verdicts, checks that every
// packet is accounted for, writes output captures, and with --expect
// compares them with a golden directory. Exit codes, the same for every
// command: 0 success, 1 failure (bad input, I/O error, unbalanced
// accounting), 2 usage, 3 golden mismatch, 130 interrupted.
package main
