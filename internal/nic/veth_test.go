package nic_test

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"os"
	"testing"

	"github.com/warpflow/warpflow/internal/lab"
	"github.com/warpflow/warpflow/internal/nic"
)

// TestVeth reads the lab's dp0 (a veth) from inside its namespace.
func TestVeth(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("needs root, and CI runs as root: not skipping under CI=true")
		}
		t.Skip("needs root (a lab of namespaces and veths)")
	}
	var b [3]byte
	rand.Read(b[:])
	o := lab.DefaultOptions()
	o.Prefix = "n" + hex.EncodeToString(b[:])
	o.Queues = 2
	topo, err := lab.Up(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := lab.Down(o.Prefix); err != nil {
			t.Error(err)
		}
	})
	err = lab.Do(topo.DP0.Namespace, func() error {
		d, err := nic.DriverInfo(topo.DP0.Name)
		if err != nil || d.Name != "veth" {
			t.Errorf("driver %+v %v, want veth", d, err)
		}
		c, err := nic.GetChannels(topo.DP0.Name)
		if err != nil || c.RX != 2 || c.TX != 2 {
			t.Errorf("channels %+v %v, want 2 rx and 2 tx", c, err)
		}
		if _, err := nic.GetRSS(topo.DP0.Name); !errors.Is(err, nic.ErrNotSupported) {
			t.Errorf("veth RSS: %v, want nic.ErrNotSupported", err)
		}
		ifc, err := net.InterfaceByName(topo.DP0.Name)
		if err != nil {
			return err
		}
		f, err := nic.GetXDPFeatures(ifc.Index)
		if errors.Is(err, nic.ErrNotSupported) {
			t.Logf("no netdev netlink family: %v", err)
			return nil
		}
		if err != nil || !f.Native() || f.XSKZeroCopy {
			t.Errorf("veth XDP features %+v %v: want native XDP and no zero-copy", f, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestOffloads: the lab's veths come up with the four offloads off; GRO
// turned on reads on, and off again; an unknown feature is an error.
func TestOffloads(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("needs root, and CI runs as root: not skipping under CI=true")
		}
		t.Skip("needs root (a lab of namespaces and veths)")
	}
	var b [3]byte
	rand.Read(b[:])
	o := lab.DefaultOptions()
	o.Prefix = "n" + hex.EncodeToString(b[:])
	topo, err := lab.Up(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := lab.Down(o.Prefix); err != nil {
			t.Error(err)
		}
	})
	err = lab.Do(topo.DP0.Namespace, func() error {
		for _, f := range []nic.Offload{nic.TXChecksum, nic.TSO, nic.GSO, nic.GRO} {
			if on, err := nic.GetOffload(topo.DP0.Name, f); err != nil || on {
				t.Errorf("%s after lab up: on=%v %v, want off", f, on, err)
			}
		}
		if err := nic.SetOffload(topo.DP0.Name, nic.GRO, true); err != nil {
			return err
		}
		if on, err := nic.GetOffload(topo.DP0.Name, nic.GRO); err != nil || !on {
			t.Errorf("gro after set on: %v %v", on, err)
		}
		if err := nic.SetOffload(topo.DP0.Name, nic.GRO, false); err != nil {
			return err
		}
		if on, err := nic.GetOffload(topo.DP0.Name, nic.GRO); err != nil || on {
			t.Errorf("gro after set off: %v %v", on, err)
		}
		if _, err := nic.GetOffload(topo.DP0.Name, nic.Offload(9)); err == nil {
			t.Error("an unknown offload was read")
		}
		if err := nic.SetOffload("nosuchif0", nic.GRO, false); err == nil {
			t.Error("a missing interface was set")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
