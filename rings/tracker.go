package rings

import (
	"errors"
	"fmt"
	"slices"
	"sort"
)

// Owner names a place a frame can be: the arena's free stack, a port, a
// ring, a worker, an output. Each place is its own Owner: a port registers
// its places (its fill, RX, TX and completion rings, the kernel behind
// them) by name with Tracker.Owner, the engine its own. Owners are small
// integers interned by a Tracker from their names.
type Owner uint16

const (
	// OwnerFree is the arena's free stack.
	OwnerFree Owner = 0
	// OwnerUntracked holds the frames that were already allocated when the
	// Tracker was made.
	OwnerUntracked Owner = 1
)

// Errors a Tracker reports, wrapped with the frame and owners involved.
var (
	ErrDoubleFree     = errors.New("frame freed twice")
	ErrWrongOwner     = errors.New("frame not held by the owner moving it")
	ErrLostFrame      = errors.New("frame lost")
	ErrDuplicateFrame = errors.New("frame in two places")
	ErrBadAddr        = errors.New("address outside the arena")
)

// Tracker is the accounting (debug) mode of an Arena: it records which
// single owner holds every frame, checks each hand-off against that record,
// and audits the whole arena on demand. It catches a frame freed twice, a
// frame handed on by someone who does not hold it, and a frame that has
// vanished from every place.
//
// A move costs a slice index and a compare, but the tracker is for tests and
// debug builds, off the hot path; use it from one goroutine (or under the
// caller's lock). It reads the arena's free stack, so the arena must be quiescent
// during Check.
type Tracker struct {
	a      *Arena
	owner  []Owner // by frame number
	names  []string
	byName map[string]Owner
}

// NewTracker returns a tracker for a. Frames on a's free stack start owned
// by OwnerFree, every other frame by OwnerUntracked.
func NewTracker(a *Arena) *Tracker {
	t := &Tracker{
		a:      a,
		owner:  make([]Owner, a.Frames()),
		names:  []string{"free", "untracked"},
		byName: map[string]Owner{"free": OwnerFree, "untracked": OwnerUntracked},
	}
	for i := range t.owner {
		t.owner[i] = OwnerUntracked
	}
	for _, base := range a.free {
		if f, ok := t.frame(base); ok {
			t.owner[f] = OwnerFree
		}
	}
	return t
}

// Owner returns the owner called name, interning it on first use. The
// names "free" and "untracked" are OwnerFree and OwnerUntracked.
func (t *Tracker) Owner(name string) Owner {
	if o, ok := t.byName[name]; ok {
		return o
	}
	if len(t.names) >= int(ownerNone) {
		return OwnerUntracked // out of IDs: a debug aid should not fail the program
	}
	o := Owner(len(t.names))
	t.names = append(t.names, name)
	t.byName[name] = o
	return o
}

// Name returns o's name.
func (t *Tracker) Name(o Owner) string {
	if int(o) < len(t.names) {
		return t.names[o]
	}
	return fmt.Sprintf("owner(%d)", o)
}

// frame returns the frame number holding addr.
func (t *Tracker) frame(addr uint64) (int, bool) {
	f := addr/uint64(t.a.frameSize) - uint64(t.a.first) // wraps below the arena's part
	if f >= uint64(len(t.owner)) {
		return 0, false
	}
	return int(f), true
}

// OwnerOf returns who holds the frame containing addr.
func (t *Tracker) OwnerOf(addr uint64) (Owner, error) {
	f, ok := t.frame(addr)
	if !ok {
		return 0, fmt.Errorf("owner of %#x: %w", addr, ErrBadAddr)
	}
	return t.owner[f], nil
}

// Move records that the frame containing addr passes from one owner to
// another. It fails, recording nothing, unless from holds the frame now.
func (t *Tracker) Move(addr uint64, from, to Owner) error {
	f, ok := t.frame(addr)
	if !ok {
		return fmt.Errorf("move %#x: %w", addr, ErrBadAddr)
	}
	if cur := t.owner[f]; cur != from {
		if cur == OwnerFree && to == OwnerFree {
			return fmt.Errorf("move frame %#x from %s to free: %w", t.base(f), t.Name(from), ErrDoubleFree)
		}
		return fmt.Errorf("move frame %#x from %s to %s: held by %s: %w",
			t.base(f), t.Name(from), t.Name(to), t.Name(cur), ErrWrongOwner)
	}
	t.owner[f] = to
	return nil
}

// Enter records that the frame containing addr enters place to from
// wherever it is now, for a hand-off whose giver the tracker cannot name (a
// port that does not track its own places hands the engine a frame it took
// from the arena, a kernel ring or its own store). It returns where the
// frame was. A frame already in to, or in one of the places in busy (places
// that do not give frames up this way, such as the engine's own while it
// holds the frame), is in two places: the error names the frame and both,
// and wraps ErrDuplicateFrame. Nothing is recorded on error.
func (t *Tracker) Enter(addr uint64, to Owner, busy ...Owner) (from Owner, err error) {
	f, ok := t.frame(addr)
	if !ok {
		return 0, fmt.Errorf("enter %#x: %w", addr, ErrBadAddr)
	}
	cur := t.owner[f]
	if cur == to || slices.Contains(busy, cur) {
		return cur, fmt.Errorf("frame %#x enters %s while held by %s: %w", t.base(f), t.Name(to), t.Name(cur), ErrDuplicateFrame)
	}
	t.owner[f] = to
	return cur, nil
}

// Places returns the names of every place interned so far, indexed by
// Owner: OwnerFree and OwnerUntracked first, then each port's and the
// engine's places in the order they were registered.
func (t *Tracker) Places() []string { return slices.Clone(t.names) }

// MoveDescs moves the frames of all descriptors in ds, stopping at the first
// error.
func (t *Tracker) MoveDescs(ds []Desc, from, to Owner) error {
	for i := range ds {
		if err := t.Move(ds[i].Addr, from, to); err != nil {
			return err
		}
	}
	return nil
}

// Alloc allocates a frame from the arena for owner to and records it.
func (t *Tracker) Alloc(to Owner) (addr uint64, ok bool) {
	addr, ok = t.a.Alloc()
	if !ok {
		return 0, false
	}
	if f, ok := t.frame(addr); ok {
		t.owner[f] = to // the arena just gave it out: whatever we had recorded, it was free
	}
	return addr, true
}

// Free returns the frame holding addr to the arena on behalf of from. It
// checks first, so a double free is reported and never reaches (and
// corrupts) the arena's free stack.
func (t *Tracker) Free(addr uint64, from Owner) error {
	if err := t.Move(addr, from, OwnerFree); err != nil {
		return err
	}
	t.a.Free(addr)
	return nil
}

func (t *Tracker) base(f int) uint64 { return uint64(f+t.a.first) * uint64(t.a.frameSize) }

// Counts returns how many frames each owner holds, by owner name, as
// recorded (Check also verifies the record).
func (t *Tracker) Counts() map[string]int {
	c := make(map[string]int)
	for _, o := range t.owner {
		c[t.Name(o)]++
	}
	return c
}

// maxCheckErrs caps how many problems Check lists, so a badly broken run
// still yields a readable error.
const maxCheckErrs = 16

// Check audits the whole arena and returns the per-owner counts with every
// problem found (joined). The free stack is read from the arena; held lists,
// for each owner whose contents the caller can enumerate (a ring drained
// for the purpose, a batch, a port's queue), the descriptors it holds now.
// It verifies that:
//   - every address on the free stack names a frame base, once, recorded free;
//   - every recorded free frame is on the free stack;
//   - every descriptor in held[o] names a frame recorded as o's, and no frame
//     appears twice anywhere (ErrDuplicateFrame);
//   - every frame recorded as owned by an owner listed in held appears in
//     its list (ErrLostFrame).
//
// Frames of owners not listed in held are counted but not verified.
func (t *Tracker) Check(held map[Owner][]Desc) (map[string]int, error) {
	var errs []error
	add := func(err error) {
		if len(errs) < maxCheckErrs {
			errs = append(errs, err)
		}
	}
	seen := make([]Owner, len(t.owner)) // where the audit found each frame; ownerNone if nowhere
	for i := range seen {
		seen[i] = ownerNone
	}
	fmask := uint64(t.a.frameSize - 1)
	for _, base := range t.a.free {
		f, ok := t.frame(base)
		switch {
		case !ok || base&fmask != 0:
			add(fmt.Errorf("free stack holds %#x: %w", base, ErrBadAddr))
			continue
		case seen[f] != ownerNone:
			add(fmt.Errorf("frame %#x on the free stack twice: %w", base, ErrDoubleFree))
			continue
		case t.owner[f] != OwnerFree:
			add(fmt.Errorf("frame %#x on the free stack but held by %s: %w", base, t.Name(t.owner[f]), ErrWrongOwner))
		}
		seen[f] = OwnerFree
	}
	owners := make([]Owner, 0, len(held))
	for o := range held {
		owners = append(owners, o)
	}
	sort.Slice(owners, func(i, j int) bool { return owners[i] < owners[j] }) // deterministic messages
	for _, o := range owners {
		for _, d := range held[o] {
			f, ok := t.frame(d.Addr)
			switch {
			case !ok:
				add(fmt.Errorf("%s holds %#x: %w", t.Name(o), d.Addr, ErrBadAddr))
				continue
			case seen[f] != ownerNone:
				add(fmt.Errorf("frame %#x held by %s and by %s: %w", t.base(f), t.Name(seen[f]), t.Name(o), ErrDuplicateFrame))
				continue
			case t.owner[f] != o:
				add(fmt.Errorf("frame %#x found in %s but recorded as %s's: %w", t.base(f), t.Name(o), t.Name(t.owner[f]), ErrWrongOwner))
			}
			seen[f] = o
		}
	}
	for f, o := range t.owner {
		if seen[f] != ownerNone {
			continue
		}
		if _, listed := held[o]; o == OwnerFree || listed {
			add(fmt.Errorf("frame %#x recorded as %s's is not there: %w", t.base(f), t.Name(o), ErrLostFrame))
		}
	}
	return t.Counts(), errors.Join(errs...)
}

// ownerNone marks a frame the audit has not found yet.
const ownerNone = ^Owner(0)
