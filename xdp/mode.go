package xdp

import "fmt"

// BindMode is how an AF_XDP socket moves frames between the driver and
// the UMEM.
type BindMode int

const (
	// BindAuto asks for zero-copy and takes copy mode where the driver
	// cannot do zero-copy (the kernel's own fallback, XDP bind flags 0).
	BindAuto BindMode = iota
	// BindZeroCopy demands zero-copy (XDP_ZEROCOPY); a driver without it
	// fails the bind with an error wrapping ErrNotSupported.
	BindZeroCopy
	// BindCopy forces copy mode (XDP_COPY): the kernel copies each frame
	// between its buffers and the UMEM.
	BindCopy
)

func (m BindMode) String() string {
	switch m {
	case BindAuto:
		return "auto"
	case BindZeroCopy:
		return "zerocopy"
	case BindCopy:
		return "copy"
	}
	return fmt.Sprintf("BindMode(%d)", int(m))
}

func (m BindMode) valid() bool { return m >= BindAuto && m <= BindCopy }

// ParseBindMode parses "auto", "zerocopy" (or "zero-copy", "zc") and "copy".
func ParseBindMode(s string) (BindMode, error) {
	switch s {
	case "auto", "":
		return BindAuto, nil
	case "zerocopy", "zero-copy", "zc":
		return BindZeroCopy, nil
	case "copy":
		return BindCopy, nil
	}
	return 0, fmt.Errorf("bind mode %q: want auto, zerocopy or copy", s)
}

// AttachMode is where the XDP program runs.
type AttachMode int

const (
	// AttachAuto tries native (driver) mode and falls back to generic.
	AttachAuto AttachMode = iota
	// AttachNative runs the program in the driver (XDP_FLAGS_DRV_MODE).
	AttachNative
	// AttachGeneric runs it on the skb path (XDP_FLAGS_SKB_MODE): works on
	// every interface, slower, and always pairs with copy-mode sockets.
	AttachGeneric
)

func (m AttachMode) String() string {
	switch m {
	case AttachAuto:
		return "auto"
	case AttachNative:
		return "native"
	case AttachGeneric:
		return "generic"
	}
	return fmt.Sprintf("AttachMode(%d)", int(m))
}

func (m AttachMode) valid() bool { return m >= AttachAuto && m <= AttachGeneric }

// ParseAttachMode parses "auto", "native" (or "driver", "drv") and
// "generic" (or "skb").
func ParseAttachMode(s string) (AttachMode, error) {
	switch s {
	case "auto", "":
		return AttachAuto, nil
	case "native", "driver", "drv":
		return AttachNative, nil
	case "generic", "skb":
		return AttachGeneric, nil
	}
	return 0, fmt.Errorf("attach mode %q: want auto, native or generic", s)
}
