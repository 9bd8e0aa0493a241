package baseline

import "time"

// Result is one baseline measurement.
type Result struct {
	// Packets is the number of packets processed in the timed region: for
	// Testpmd the packets received on the replay port.
	Packets uint64
	// Elapsed is the length of the timed region.
	Elapsed time.Duration
	// Mpps is Packets per second, in millions.
	Mpps float64
	// NsPerPacket is Elapsed divided by Packets.
	NsPerPacket float64
	// RXPackets and TXPackets are testpmd's accumulated forward statistics;
	// zero for the in-process gopacket baselines.
	RXPackets, TXPackets uint64
}

func newResult(packets uint64, elapsed time.Duration) Result {
	r := Result{Packets: packets, Elapsed: elapsed}
	if packets > 0 && elapsed > 0 {
		r.Mpps = float64(packets) / elapsed.Seconds() / 1e6
		r.NsPerPacket = float64(elapsed.Nanoseconds()) / float64(packets)
	}
	return r
}
