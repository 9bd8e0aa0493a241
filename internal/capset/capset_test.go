package capset

import (
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// The table's bit numbers are the kernel's (x/sys/unix's constants).
func TestBitsMatchTheKernel(t *testing.T) {
	for name, bit := range map[string]int{
		"CAP_CHOWN": unix.CAP_CHOWN, "CAP_NET_ADMIN": unix.CAP_NET_ADMIN, "CAP_NET_RAW": unix.CAP_NET_RAW,
		"CAP_IPC_LOCK": unix.CAP_IPC_LOCK, "CAP_SYS_ADMIN": unix.CAP_SYS_ADMIN, "CAP_SYS_RESOURCE": unix.CAP_SYS_RESOURCE,
		"CAP_PERFMON": unix.CAP_PERFMON, "CAP_BPF": unix.CAP_BPF, "CAP_CHECKPOINT_RESTORE": unix.CAP_CHECKPOINT_RESTORE,
	} {
		if got, err := Bit(name); err != nil || got != bit {
			t.Errorf("Bit(%s) = %d, %v; the kernel's is %d", name, got, err, bit)
		}
	}
	if len(names) != unix.CAP_LAST_CAP+1 {
		t.Errorf("the table has %d names, x/sys/unix knows %d capabilities: add the new ones", len(names), unix.CAP_LAST_CAP+1)
	}
}

func TestSet(t *testing.T) {
	s, err := Of("NET_ADMIN", "cap_bpf", "CAP_NET_RAW")
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Names(); !slices.Equal(got, []string{"CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_BPF"}) {
		t.Errorf("names %v", got)
	}
	sub, _ := Of("CAP_BPF")
	other, _ := Of("CAP_SYS_ADMIN")
	if !s.Has(sub) || s.Has(other) || s.Has(sub|other) {
		t.Error("Has")
	}
	if _, err := Of("CAP_NOPE"); err == nil {
		t.Error("an unknown name was accepted")
	}
	if got := Set(1 << 50).Names(); !slices.Equal(got, []string{"cap_50"}) {
		t.Errorf("unnamed bit: %v", got)
	}
}

func TestReadSelf(t *testing.T) {
	s, err := Read(0)
	if err != nil {
		t.Fatal(err)
	}
	if s.Effective&^s.Permitted != 0 {
		t.Errorf("effective %v not within permitted %v", s.Effective, s.Permitted)
	}
	if s.UID != unix.Geteuid() {
		t.Errorf("uid %d, geteuid %d", s.UID, unix.Geteuid())
	}
}
