package xdp

import (
	"errors"
	"net"
	"os"
	"strings"
	"testing"
)

func TestParseModes(t *testing.T) {
	for _, m := range []BindMode{BindAuto, BindZeroCopy, BindCopy} {
		got, err := ParseBindMode(m.String())
		if err != nil || got != m {
			t.Errorf("ParseBindMode(%q) = %v, %v", m.String(), got, err)
		}
	}
	for _, m := range []AttachMode{AttachAuto, AttachNative, AttachGeneric} {
		got, err := ParseAttachMode(m.String())
		if err != nil || got != m {
			t.Errorf("ParseAttachMode(%q) = %v, %v", m.String(), got, err)
		}
	}
	if _, err := ParseBindMode("fast"); err == nil || !strings.Contains(err.Error(), `"fast"`) {
		t.Errorf("ParseBindMode(fast) = %v, want an error naming it", err)
	}
	if _, err := ParseAttachMode("hw"); err == nil || !strings.Contains(err.Error(), `"hw"`) {
		t.Errorf("ParseAttachMode(hw) = %v, want an error naming it", err)
	}
}

func TestUMEMOptions(t *testing.T) {
	for _, tc := range []struct {
		o    UMEMOptions
		want string
	}{
		{UMEMOptions{Frames: 16, FrameSize: 3000}, "frame size 3000"},
		{UMEMOptions{Frames: 0, FrameSize: 2048}, "frame count 0"},
		{UMEMOptions{Frames: 16, FrameSize: 2048, Headroom: -1}, "headroom -1"},
		{UMEMOptions{Frames: 16, FrameSize: 2048, Headroom: 1024}, "headroom 1024"},
	} {
		if _, err := NewUMEM(tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewUMEM(%+v) = %v, want error containing %q", tc.o, err, tc.want)
		}
	}
	u, err := NewUMEM(UMEMOptions{Frames: 3, FrameSize: 2048})
	if err != nil {
		t.Fatal(err)
	}
	if len(u.Mem()) != 3*2048 {
		t.Errorf("Mem is %d bytes, want %d", len(u.Mem()), 3*2048)
	}
	if p := uintptr(len(u.Mem()[:cap(u.Mem())])); p%uintptr(os.Getpagesize()) != 0 {
		t.Errorf("mapping of %d bytes is not page sized", p)
	}
	u.Mem()[len(u.Mem())-1] = 1 // writable to the end
	if u.FrameMask() != 2047 {
		t.Errorf("FrameMask = %d", u.FrameMask())
	}
	if err := u.Close(); err != nil {
		t.Fatal(err)
	}
	if err := u.Close(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("second Close = %v, want net.ErrClosed", err)
	}
	if _, err := NewSocket(u, DefaultSocketOptions("lo", 0)); err == nil {
		t.Error("NewSocket on a closed UMEM succeeded")
	}
}

func TestSocketOptionsValidate(t *testing.T) {
	base := DefaultSocketOptions("eth0", 0)
	for _, tc := range []struct {
		mod  func(*SocketOptions)
		want string
	}{
		{func(o *SocketOptions) { o.Interface = "" }, "no interface"},
		{func(o *SocketOptions) { o.Queue = -1 }, "queue -1"},
		{func(o *SocketOptions) { o.RXSize = 1000 }, "rx ring size 1000"},
		{func(o *SocketOptions) { o.TXSize = -2 }, "tx ring size -2"},
		{func(o *SocketOptions) { o.FillSize = 0 }, "fill ring size 0"},
		{func(o *SocketOptions) { o.CompletionSize = 3 }, "completion ring size 3"},
		{func(o *SocketOptions) { o.RXSize, o.TXSize = 0, 0 }, "both 0"},
		{func(o *SocketOptions) { o.Bind = 7 }, "bind mode 7"},
		{func(o *SocketOptions) { o.BusyPoll.Budget = -1 }, "budget -1"},
	} {
		o := base
		tc.mod(&o)
		if err := o.validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("validate = %v, want error containing %q", err, tc.want)
		}
	}
	if err := base.validate(); err != nil {
		t.Errorf("defaults invalid: %v", err)
	}
}
