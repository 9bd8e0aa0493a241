package main

import (
	"encoding/binary"
	"fmt"
	"net"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// Bench capture shape: 4096 frames of exactly benchFrame bytes (Ethernet
// header through payload; the file carries no FCS, so on a wire each frame
// would be 68 bytes with it), spread round-robin over benchFlows flows.
const (
	benchPackets = 4096
	benchFlows   = 1024
	benchFrame   = 64
)

var benchBase = time.Date(2024, 1, 4, 0, 0, 0, 0, time.UTC)

// benchFlow returns the source address and port of flow i: 10.1.x.y with
// 64 hosts per /24, ports from 10000.
func benchFlow(i int) (net.IP, uint16) {
	return net.IPv4(10, 1, byte(i>>6), byte(i&63)+1).To4(), 10000 + uint16(i)
}

// buildBench returns bench-64.pcap (UDP) or bench-64-tcp.pcap (TCP ACK
// segments). Packet k belongs to flow k%benchFlows and carries k in its
// payload and IP ID.
func buildBench(tcp bool) *capture {
	name := "bench-64.pcap"
	if tcp {
		name = "bench-64-tcp.pcap"
	}
	c := newCapture(name, layers.LinkTypeEthernet, benchBase)
	c.step = time.Microsecond
	dstIP := net.IPv4(10, 255, 0, 1).To4()
	eth := &layers.Ethernet{
		SrcMAC:       net.HardwareAddr{0x02, 0x00, 0x5e, 0x20, 0x00, 0x01},
		DstMAC:       net.HardwareAddr{0x02, 0x00, 0x5e, 0x20, 0x00, 0x02},
		EthernetType: layers.EthernetTypeIPv4,
	}
	for k := range benchPackets {
		src, sport := benchFlow(k % benchFlows)
		ip := &layers.IPv4{Version: 4, TTL: 64, Id: uint16(k), Flags: layers.IPv4DontFragment, SrcIP: src, DstIP: dstIP}
		var l4 gopacket.SerializableLayer
		payload := make([]byte, benchFrame-ethLen-20-8) // UDP: 22 bytes
		if tcp {
			ip.Protocol = layers.IPProtocolTCP
			l4 = &layers.TCP{SrcPort: layers.TCPPort(sport), DstPort: 5001, Seq: uint32(k), Ack: 1, ACK: true, PSH: true, Window: 65535}
			payload = payload[:benchFrame-ethLen-20-20] // TCP: 10 bytes
		} else {
			ip.Protocol = layers.IPProtocolUDP
			l4 = &layers.UDP{SrcPort: layers.UDPPort(sport), DstPort: 5001}
		}
		binary.BigEndian.PutUint64(payload, uint64(k))
		for i := 8; i < len(payload); i++ {
			payload[i] = byte(i)
		}
		c.frame(fmt.Sprintf("flow %d", k%benchFlows), eth, ip, l4, gopacket.Payload(payload))
		if n := len(c.recs); c.err == nil && len(c.recs[n-1].data) != benchFrame {
			c.fail(fmt.Errorf("frame is %d bytes, want %d", len(c.recs[n-1].data), benchFrame))
		}
	}
	return c
}
