package workers

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/warpflow/warpflow/rings"
)

func TestOptionsValidation(t *testing.T) {
	valid := func() Options { return testOptions(t, 2) }
	two := kernelsOf(2, func(int) Kernel { return markKernel{} })
	for _, tc := range []struct {
		name    string
		edit    func(o *Options)
		kernels []Kernel
		want    string // must appear in the error: names the bad value
	}{
		{"zero workers", func(o *Options) { o.Workers = 0 }, nil, "workers 0"},
		{"negative workers", func(o *Options) { o.Workers = -3 }, nil, "workers -3"},
		{"too few kernels", nil, two[:1], "kernels: got 1"},
		{"nil kernel", nil, []Kernel{markKernel{}, nil}, "kernels[1]: nil"},
		{"slots not power of two", func(o *Options) { o.Slots = 6 }, nil, "slots 6"},
		{"slots below workers", func(o *Options) { o.Workers = 4; o.Slots = 2 }, kernelsOf(4, func(int) Kernel { return markKernel{} }), "slots 2"},
		{"slots negative", func(o *Options) { o.Slots = -4 }, nil, "slots -4"},
		{"slots too many", func(o *Options) { o.Slots = MaxSlots * 2 }, nil, "slots 131072"},
		{"nil NewBatch", func(o *Options) { o.NewBatch = nil }, nil, "new batch: nil"},
		{"NewBatch returns nil", func(o *Options) { o.NewBatch = func() *rings.Batch { return nil } }, nil, "returned nil for slot 0"},
		{"negative spins", func(o *Options) { o.Idle.Spins = -1 }, nil, "idle spins -1"},
		{"negative yields", func(o *Options) { o.Idle.Yields = -2 }, nil, "idle yields -2"},
		{"negative max park", func(o *Options) { o.Idle.MaxPark = -time.Second }, nil, "idle max park -1s"},
		{"negative cpu", func(o *Options) { o.CPUs = []int{0, -1} }, nil, "cpus[1] -1"},
		{"cpu out of range", func(o *Options) { o.CPUs = []int{1 << 20} }, nil, "cpus[0] 1048576"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := valid()
			if tc.edit != nil {
				tc.edit(&o)
			}
			ks := tc.kernels
			if ks == nil {
				ks = kernelsOf(max(o.Workers, 0), func(int) Kernel { return markKernel{} })
			}
			p, err := NewPool(o, ks)
			if err == nil {
				p.Close()
				t.Fatal("NewPool accepted bad options")
			}
			if !errors.Is(err, ErrInvalidOptions) {
				t.Errorf("error %q does not wrap ErrInvalidOptions", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not name %q", err, tc.want)
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	o := DefaultOptions()
	if o.Workers < 1 {
		t.Fatalf("default workers %d", o.Workers)
	}
	if o.Idle != DefaultIdlePolicy() {
		t.Fatalf("default idle %+v, want %+v", o.Idle, DefaultIdlePolicy())
	}
	o.Workers = 3
	o.NewBatch = batchMaker(t, testBatchCap)
	made := 0
	nb := o.NewBatch
	o.NewBatch = func() *rings.Batch { made++; return nb() }
	p := newTestPool(t, o, kernelsOf(3, func(int) Kernel { return markKernel{} }))
	if p.Slots() != 16 || made != 16 {
		t.Fatalf("3 workers: %d slots, %d batches made; want 4*3 rounded up = 16", p.Slots(), made)
	}
}
