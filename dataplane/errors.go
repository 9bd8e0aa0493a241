package dataplane

import "errors"

var (
	// ErrNotReceiver is returned by Receive on a transmit-only port.
	ErrNotReceiver = errors.New("port does not receive")
	// ErrNotTransmitter is returned by Transmit on a receive-only port.
	ErrNotTransmitter = errors.New("port does not transmit")
	// ErrUnsupportedLinkType is wrapped by errors for captures whose link
	// type the replay port cannot turn into Ethernet frames.
	ErrUnsupportedLinkType = errors.New("unsupported link type")
	// ErrCorruptCapture is wrapped by errors for captures that cannot be
	// read (bad magic, impossible record lengths, ...).
	ErrCorruptCapture = errors.New("corrupt capture")
)

// ErrFramesLost is wrapped by Run's error when a Completer did not give
// back every frame it accepted within Options.DrainTimeout; the frames are
// counted in Stats.FramesLost and FrameAccount.Lost.
var ErrFramesLost = errors.New("frames not returned by their output")
