package main

import (
	"bytes"
	"encoding/binary"
	"time"

	"github.com/gopacket/gopacket/pcapgo"
)

// pcapHeader returns a valid classic pcap global header (microsecond
// timestamps, little-endian, Ethernet).
func pcapHeader() ([]byte, error) {
	var b bytes.Buffer
	if err := pcapgo.NewWriter(&b).WriteFileHeader(snapLen, ethLinkID); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// recordHeader is a classic pcap record header claiming incl captured and
// orig original bytes.
func recordHeader(t time.Time, incl, orig uint32) []byte {
	h := make([]byte, 16)
	binary.LittleEndian.PutUint32(h[0:], uint32(t.Unix()))
	binary.LittleEndian.PutUint32(h[4:], uint32(t.Nanosecond()/1000))
	binary.LittleEndian.PutUint32(h[8:], incl)
	binary.LittleEndian.PutUint32(h[12:], orig)
	return h
}

// buildBad returns the bad/ files: broken containers rather than broken
// packets. frame is any valid Ethernet frame of at least 100 bytes.
func buildBad(frame []byte) (map[string][]byte, error) {
	hdr, err := pcapHeader()
	if err != nil {
		return nil, err
	}
	ts := time.Date(2024, 1, 6, 0, 0, 0, 0, time.UTC)
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

	corrupt := cat(hdr, recordHeader(ts, 60, 60), frame[:60])
	copy(corrupt, []byte{0xde, 0xad, 0xbe, 0xef})
	return map[string][]byte{
		"bad/corrupt-magic.pcap":    corrupt,
		"bad/truncated-record.pcap": cat(hdr, recordHeader(ts, 100, 100), frame[:40]),
		"bad/huge-record.pcap":      cat(hdr, recordHeader(ts, 0xffffffff, 0xffffffff), frame[:64]),
		"bad/empty.pcap":            hdr,
	}, nil
}
