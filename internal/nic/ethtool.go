package nic

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ErrNotSupported is wrapped when the driver (or kernel) does not
// implement a query.
var ErrNotSupported = errors.New("not supported by the driver")

// Driver is ETHTOOL_GDRVINFO's answer.
type Driver struct {
	Name, Version, Firmware, Bus string
}

// Channels is ETHTOOL_GCHANNELS's answer: the queues the driver has
// configured and the most it allows, by kind.
type Channels struct {
	MaxRX, MaxTX, MaxOther, MaxCombined uint32
	RX, TX, Other, Combined             uint32
}

// Rings is ETHTOOL_GRINGPARAM's answer: descriptors per ring, current and
// most.
type Rings struct {
	RX, RXMax, TX, TXMax uint32
}

// RSS is ETHTOOL_GRSSH's answer: the hash key, function and indirection
// table of the default RSS context.
type RSS struct {
	Key      []byte
	Indir    []uint32
	HashFunc uint8 // ETH_RSS_HASH_* bit: 1 toeplitz, 2 xor, 4 crc32
	// InputXfrm is the input transform (RXH_XFRM_SYM_XOR = 1: symmetric
	// XOR of source and destination before hashing), Linux >= 6.8; 0
	// before.
	InputXfrm uint8
}

// HashName names the hash function.
func (r RSS) HashName() string {
	switch r.HashFunc {
	case 1:
		return "toeplitz"
	case 2:
		return "xor"
	case 4:
		return "crc32"
	case 0:
		return "unknown"
	}
	return fmt.Sprintf("hfunc 0x%x", r.HashFunc)
}

// SymmetricKey reports whether the key makes Toeplitz hashing symmetric
// in source and destination (addresses and ports): a key made of one
// repeated 16-bit value, such as 0x6d5a (the Woo and Park key).
func (r RSS) SymmetricKey() bool {
	if len(r.Key) < 4 {
		return false
	}
	for i := 2; i < len(r.Key); i++ {
		if r.Key[i] != r.Key[i%2] {
			return false
		}
	}
	return true
}

// ifreq is struct ifreq with ifr_data (a pointer) as its union.
type ifreq struct {
	name [unix.IFNAMSIZ]byte
	data unsafe.Pointer
	_    [24 - unsafe.Sizeof(uintptr(0))]byte
}

// ethtool runs one SIOCETHTOOL command on iface; cmd points at the
// command's struct, whose first field is the command number.
func ethtool(iface string, cmd unsafe.Pointer) error {
	if len(iface) >= unix.IFNAMSIZ {
		return fmt.Errorf("interface name %q: longer than %d bytes", iface, unix.IFNAMSIZ-1)
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("ethtool socket: %w", err)
	}
	defer unix.Close(fd)
	var ifr ifreq
	copy(ifr.name[:], iface)
	ifr.data = cmd
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr))); errno != 0 {
		if errno == unix.EOPNOTSUPP || errno == unix.ENOTSUP {
			return fmt.Errorf("%s: %w (%w)", iface, ErrNotSupported, errno)
		}
		return fmt.Errorf("%s: ethtool: %w", iface, errno)
	}
	return nil
}

// DriverInfo reads iface's driver.
func DriverInfo(iface string) (Driver, error) {
	var d unix.EthtoolDrvinfo
	d.Cmd = unix.ETHTOOL_GDRVINFO
	if err := ethtool(iface, unsafe.Pointer(&d)); err != nil {
		return Driver{}, err
	}
	s := unix.ByteSliceToString // the kernel leaves what follows the NUL undefined
	return Driver{Name: s(d.Driver[:]), Version: s(d.Version[:]), Firmware: s(d.Fw_version[:]), Bus: s(d.Bus_info[:])}, nil
}

// ethtoolChannels is struct ethtool_channels.
type ethtoolChannels struct {
	cmd                                 uint32
	maxRX, maxTX, maxOther, maxCombined uint32
	rx, tx, other, combined             uint32
}

// GetChannels reads iface's channel counts.
func GetChannels(iface string) (Channels, error) {
	c := ethtoolChannels{cmd: unix.ETHTOOL_GCHANNELS}
	if err := ethtool(iface, unsafe.Pointer(&c)); err != nil {
		return Channels{}, err
	}
	return Channels{MaxRX: c.maxRX, MaxTX: c.maxTX, MaxOther: c.maxOther, MaxCombined: c.maxCombined, RX: c.rx, TX: c.tx, Other: c.other, Combined: c.combined}, nil
}

// ethtoolRingparam is struct ethtool_ringparam.
type ethtoolRingparam struct {
	cmd                                          uint32
	rxMax, rxMiniMax, rxJumboMax, txMax          uint32
	rxPending, rxMiniPending, rxJumboPending, tx uint32
}

// GetRings reads iface's ring sizes.
func GetRings(iface string) (Rings, error) {
	r := ethtoolRingparam{cmd: unix.ETHTOOL_GRINGPARAM}
	if err := ethtool(iface, unsafe.Pointer(&r)); err != nil {
		return Rings{}, err
	}
	return Rings{RX: r.rxPending, RXMax: r.rxMax, TX: r.tx, TXMax: r.txMax}, nil
}

// ethtoolRXFH is struct ethtool_rxfh's fixed part; rss_config (the
// indirection table, then the key) follows it.
type ethtoolRXFH struct {
	cmd        uint32
	rssContext uint32
	indirSize  uint32
	keySize    uint32
	hfunc      uint8
	inputXfrm  uint8
	rsvd8      [2]uint8
	rsvd32     uint32
}

const sizeofRXFH = int(unsafe.Sizeof(ethtoolRXFH{}))

// maxRSS bounds what a driver may ask us to allocate.
const maxRSS = 1 << 16

// GetRSS reads iface's RSS key, function and indirection table.
func GetRSS(iface string) (RSS, error) {
	h := ethtoolRXFH{cmd: unix.ETHTOOL_GRSSH}
	if err := ethtool(iface, unsafe.Pointer(&h)); err != nil { // sizes only
		return RSS{}, err
	}
	if h.indirSize > maxRSS || h.keySize > maxRSS {
		return RSS{}, fmt.Errorf("%s: RSS indirection table of %d entries and key of %d bytes: implausible", iface, h.indirSize, h.keySize)
	}
	n := sizeofRXFH + 4*int(h.indirSize) + int(h.keySize)
	buf := make([]uint32, (n+3)/4) // 4-byte aligned for the struct
	p := unsafe.Pointer(&buf[0])
	*(*ethtoolRXFH)(p) = ethtoolRXFH{cmd: unix.ETHTOOL_GRSSH, indirSize: h.indirSize, keySize: h.keySize}
	if err := ethtool(iface, p); err != nil {
		return RSS{}, err
	}
	got := *(*ethtoolRXFH)(p)
	raw := unsafe.Slice((*byte)(p), n)
	r := RSS{HashFunc: got.hfunc, InputXfrm: got.inputXfrm}
	r.Indir = make([]uint32, h.indirSize)
	for i := range r.Indir {
		r.Indir[i] = *(*uint32)(unsafe.Pointer(&raw[sizeofRXFH+4*i]))
	}
	r.Key = append([]byte(nil), raw[sizeofRXFH+4*int(h.indirSize):n]...)
	return r, nil
}

// ethRXFHIndirNoChange leaves the indirection table as it is
// (ETH_RXFH_INDIR_NO_CHANGE).
const ethRXFHIndirNoChange = 0xffffffff

// SetRSSKey writes key as iface's RSS hash key, leaving the indirection
// table, the hash function and the input transform (xfrm: pass what
// GetRSS read) as they are. Writing back the key GetRSS read is how
// warpctl doctor learns that a key can be set without changing one.
func SetRSSKey(iface string, key []byte, xfrm uint8) error {
	if len(key) == 0 || len(key) > maxRSS {
		return fmt.Errorf("%s: RSS key of %d bytes", iface, len(key))
	}
	n := sizeofRXFH + len(key)
	buf := make([]uint32, (n+3)/4)
	p := unsafe.Pointer(&buf[0])
	*(*ethtoolRXFH)(p) = ethtoolRXFH{cmd: unix.ETHTOOL_SRSSH, indirSize: ethRXFHIndirNoChange, keySize: uint32(len(key)), inputXfrm: xfrm}
	copy(unsafe.Slice((*byte)(p), n)[sizeofRXFH:], key)
	return ethtool(iface, p)
}
