package nic

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Offload names one of the offload features `ethtool -K` sets by its
// short name. Each is the kernel's legacy one-feature ethtool command,
// which acts on the same feature bits as ethtool's long names:
//
//	TXChecksum  tx   tx-checksum-* (and SCTP/FCoE CRC): ETHTOOL_[GS]TXCSUM
//	TSO         tso  tx-tcp*-segmentation:              ETHTOOL_[GS]TSO
//	GSO         gso  tx-generic-segmentation:           ETHTOOL_[GS]GSO
//	GRO         gro  rx-gro:                            ETHTOOL_[GS]GRO
//
// A feature reads as on when any of its bits is on.
type Offload int

const (
	TXChecksum Offload = iota
	TSO
	GSO
	GRO
)

var offloadCmds = [...]struct {
	name     string
	get, set uint32
}{
	TXChecksum: {"tx-checksumming", unix.ETHTOOL_GTXCSUM, unix.ETHTOOL_STXCSUM},
	TSO:        {"tcp-segmentation-offload", unix.ETHTOOL_GTSO, unix.ETHTOOL_STSO},
	GSO:        {"generic-segmentation-offload", unix.ETHTOOL_GGSO, unix.ETHTOOL_SGSO},
	GRO:        {"generic-receive-offload", unix.ETHTOOL_GGRO, unix.ETHTOOL_SGRO},
}

// String is the feature's name in `ethtool -k` output.
func (f Offload) String() string {
	if f < 0 || int(f) >= len(offloadCmds) {
		return fmt.Sprintf("Offload(%d)", int(f))
	}
	return offloadCmds[f].name
}

// ethtoolValue is struct ethtool_value.
type ethtoolValue struct {
	cmd, data uint32
}

func (f Offload) valid() error {
	if f < 0 || int(f) >= len(offloadCmds) {
		return fmt.Errorf("offload %d: unknown", int(f))
	}
	return nil
}

// GetOffload reports whether feature f is on for iface.
func GetOffload(iface string, f Offload) (bool, error) {
	if err := f.valid(); err != nil {
		return false, err
	}
	v := ethtoolValue{cmd: offloadCmds[f].get}
	if err := ethtool(iface, unsafe.Pointer(&v)); err != nil {
		return false, fmt.Errorf("get %s: %w", f, err)
	}
	return v.data != 0, nil
}

// SetOffload turns feature f on or off for iface (CAP_NET_ADMIN) and
// reads it back: a driver that keeps a feature fixed accepts the request
// without changing it, and that is an error here, not a silent no-op.
// Turning the TX checksum off also turns TSO off (the kernel drops
// segmentation that needs the checksum it cannot offload).
func SetOffload(iface string, f Offload, on bool) error {
	if err := f.valid(); err != nil {
		return err
	}
	v := ethtoolValue{cmd: offloadCmds[f].set}
	if on {
		v.data = 1
	}
	if err := ethtool(iface, unsafe.Pointer(&v)); err != nil {
		return fmt.Errorf("set %s %s: %w", f, onOff(on), err)
	}
	got, err := GetOffload(iface, f)
	if err != nil {
		return err
	}
	if got != on {
		return fmt.Errorf("%s: set %s %s: the driver kept it %s (a fixed feature)", iface, f, onOff(on), onOff(got))
	}
	return nil
}

func onOff(on bool) string {
	if on {
		return "on"
	}
	return "off"
}
