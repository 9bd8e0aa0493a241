package counters

import (
	"errors"
	"fmt"
	"strings"
)

// Kind says how a counter moves.
type Kind uint8

const (
	// Counter only goes up (packets seen, rule hits): exporters rate it.
	Counter Kind = iota
	// Gauge is a level that goes up and down (flows in a table, slots in
	// flight).
	Gauge
)

func (k Kind) String() string {
	switch k {
	case Counter:
		return "counter"
	case Gauge:
		return "gauge"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// MarshalText writes the kind's name, so JSON says "counter" or "gauge".
func (k Kind) MarshalText() ([]byte, error) {
	if k > Gauge {
		return nil, fmt.Errorf("counter kind %d: not a kind", uint8(k))
	}
	return []byte(k.String()), nil
}

// UnmarshalText reads a kind's name.
func (k *Kind) UnmarshalText(b []byte) error {
	switch string(b) {
	case "counter":
		*k = Counter
	case "gauge":
		*k = Gauge
	default:
		return fmt.Errorf("counter kind %q: want counter or gauge", clip(string(b)))
	}
	return nil
}

// Decl declares one family of counters: what is counted, named once.
type Decl struct {
	// Name is the family's name, snake_case, unique among its owner's
	// families; a counter's text key is Name or Name=key.
	Name string `json:"name"`
	Kind Kind   `json:"kind"`
	// Unit is what a value counts, snake_case ("packets", "slots"), or
	// empty where the name says it ("inserts", "entries").
	Unit string `json:"unit,omitempty"`
	// Bytes says that each value has the bytes of the packets it counts
	// beside it (unit packets only).
	Bytes bool `json:"counts_bytes,omitempty"`
	// Label is the metric label a keyed family's keys go in; empty for a
	// family of one counter.
	Label string `json:"label,omitempty"`
	// Help is one sentence for people, and the metrics' HELP.
	Help string `json:"help"`
	// StatsOnly keeps the family out of the metrics: its keys are bounded
	// but too many for a series each, and their sum says nothing another
	// family does not (a count stage's 4097 VLAN keys). The stats show it.
	StatsOnly bool `json:"stats_only,omitempty"`
}

// Labels exporters set themselves, which no family may use for its keys.
var reservedLabels = []string{"queue", "stage", "backend", "port"}

// OtherKey is the key of the metric series a family's folded keys are
// summed into.
const OtherKey = "other"

// Check reports what is wrong with a declaration: a name, unit or label
// that is not snake_case, bytes counted beside anything but packets or in
// a gauge, a label that exporters set themselves, an empty or multi-line
// help.
func (d Decl) Check() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("counter %q: "+format, append([]any{d.Name}, args...)...))
	}
	if !snake(d.Name) {
		bad("name: want snake_case ([a-z][a-z0-9_]*)")
	}
	if d.Unit != "" && !snake(d.Unit) {
		bad("unit %q: want snake_case", d.Unit)
	}
	if d.Unit != "" && (d.Unit == d.Name || strings.HasSuffix(d.Name, "_"+d.Unit)) {
		bad("unit %q: the name says it already (leave the unit empty)", d.Unit)
	}
	if d.Label != "" && !snake(d.Label) {
		bad("label %q: want snake_case", d.Label)
	}
	for _, r := range reservedLabels {
		if d.Label == r {
			bad("label %q: exporters set it themselves", d.Label)
		}
	}
	if d.Bytes && (d.Unit != "packets" || d.Kind != Counter) {
		bad("bytes are counted beside packets only, in a counter")
	}
	if d.Kind > Gauge {
		bad("kind %d: not a kind", uint8(d.Kind))
	}
	if d.Help == "" || strings.ContainsAny(d.Help, "\n\r") {
		bad("help: want one line")
	}
	return errors.Join(errs...)
}

// Metric is the family's metric name when owner (a stage kind,
// "executor", "socket") exports it: warpflow_<owner>_<name>[_<unit>],
// with _total for a counter.
func (d Decl) Metric(owner string) string {
	m := "warpflow_" + owner + "_" + d.Name
	if d.Unit != "" {
		m += "_" + d.Unit
	}
	if d.Kind == Counter {
		m += "_total"
	}
	return m
}

// BytesMetric is the metric of the bytes beside a packets counter
// (Decl.Bytes): warpflow_<owner>_<name>_bytes_total.
func (d Decl) BytesMetric(owner string) string {
	return "warpflow_" + owner + "_" + d.Name + "_bytes_total"
}

// snake reports whether s is [a-z][a-z0-9_]*, not ending in '_'.
func snake(s string) bool {
	if s == "" || s[0] < 'a' || s[0] > 'z' || s[len(s)-1] == '_' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// Snake reports whether s is snake_case as declarations and JSON keys
// are: [a-z][a-z0-9_]*, not ending in '_'.
func Snake(s string) bool { return snake(s) }

// Family is a declaration with the keys one compiled component counts,
// fixed for its life.
type Family struct {
	Decl
	// Keys are the label values, in report order; nil for a family of
	// one counter.
	Keys []string
	// Fold, when above zero, is the index from which Keys share one
	// metric series keyed OtherKey, summed: a bound on the series a
	// large table makes (a filter's rules past the 256th). The stats show
	// every key.
	Fold int
}

// Single is a family of one counter.
func Single(d Decl) Family { return Family{Decl: d} }

// Keyed is a family with one counter per key.
func Keyed(d Decl, keys []string) Family { return Family{Decl: d, Keys: keys} }

// Len is how many values the family has.
func (f *Family) Len() int {
	if f.Keys == nil {
		return 1
	}
	return len(f.Keys)
}

// Folded reports whether key i shares the metric series keyed OtherKey.
func (f *Family) Folded(i int) bool { return f.Fold > 0 && i >= f.Fold }

// Layout is the families one compiled component counts, and where each of
// their values sits in the component's flat []Value: the families in
// order, each family's keys in order. It is immutable.
type Layout struct {
	fams []Family
	at   []int // first value of each family; at[len(fams)] is the total
}

// NewLayout lays fams out in order.
func NewLayout(fams ...Family) *Layout {
	l := &Layout{fams: fams, at: make([]int, len(fams)+1)}
	for i := range fams {
		l.at[i+1] = l.at[i] + fams[i].Len()
	}
	return l
}

// Families returns the layout's families (do not modify them).
func (l *Layout) Families() []Family { return l.fams }

// Len is how many values the layout has.
func (l *Layout) Len() int { return l.at[len(l.fams)] }

// At is the index of family f's first value.
func (l *Layout) At(f int) int { return l.at[f] }

// Check reports what is wrong with the layout: a bad declaration, two
// families of one name, a keyed family without a label or keys, a key
// that is empty, repeated or, where keys fold, OtherKey.
func (l *Layout) Check() error {
	var errs []error
	seen := map[string]bool{}
	for i := range l.fams {
		f := &l.fams[i]
		if err := f.Check(); err != nil {
			errs = append(errs, err)
		}
		if seen[f.Name] {
			errs = append(errs, fmt.Errorf("counter %q: declared twice", f.Name))
		}
		seen[f.Name] = true
		switch {
		case f.Keys == nil && f.Label != "":
			errs = append(errs, fmt.Errorf("counter %q: a label but no keys", f.Name))
		case f.Keys != nil && (f.Label == "" || len(f.Keys) == 0):
			errs = append(errs, fmt.Errorf("counter %q: keys want a label and at least one key", f.Name))
		}
		keys := map[string]bool{}
		for _, k := range f.Keys {
			if k == "" || keys[k] || (f.Fold > 0 && k == OtherKey) {
				errs = append(errs, fmt.Errorf("counter %q: key %q empty, repeated or the folded series' own", f.Name, clip(k)))
			}
			keys[k] = true
		}
	}
	return errors.Join(errs...)
}

// Value is one counter's value, and the bytes beside it where its family
// counts them.
type Value struct {
	Value, Bytes uint64
}

// Add adds src into dst, value by value (two instances of one layout).
func Add(dst, src []Value) {
	for i := range min(len(dst), len(src)) {
		dst[i].Value += src[i].Value
		dst[i].Bytes += src[i].Bytes
	}
}

// Group is one family with what it counted: the form counters are
// printed, exported and written as JSON in.
type Group struct {
	Decl
	Values []KeyValue `json:"values"`
}

// KeyValue is one counter of a group.
type KeyValue struct {
	// Key is the counter's key (its label's value); empty in a family of
	// one counter.
	Key   string `json:"key,omitempty"`
	Value uint64 `json:"value"`
	Bytes uint64 `json:"bytes,omitempty"`
	// Folded: /metrics sums this key with its family's other folded keys
	// into one series keyed "other" (Family.Fold).
	Folded bool `json:"folded,omitempty"`
}

// Text is kv's key as people read it: the family's name, or name=key.
func (g *Group) Text(kv KeyValue) string {
	if g.Label == "" {
		return g.Name
	}
	return g.Name + "=" + kv.Key
}

// Groups turns vals, in l's layout, into groups, in layout order: a family
// of one counter always (zero too: a gauge at zero says something), a
// keyed family with the keys that counted something (a large table would
// flood every read otherwise), and only when one did. Control path: it
// allocates.
func (l *Layout) Groups(vals []Value) []Group {
	var out []Group
	for i := range l.fams {
		f := &l.fams[i]
		at := l.at[i]
		if f.Keys == nil {
			v := vals[at]
			out = append(out, Group{Decl: f.Decl, Values: []KeyValue{{Value: v.Value, Bytes: v.Bytes}}})
			continue
		}
		var kvs []KeyValue
		for k, key := range f.Keys {
			if v := vals[at+k]; v.Value != 0 || v.Bytes != 0 {
				kvs = append(kvs, KeyValue{Key: key, Value: v.Value, Bytes: v.Bytes, Folded: f.Folded(k)})
			}
		}
		if kvs != nil {
			out = append(out, Group{Decl: f.Decl, Values: kvs})
		}
	}
	return out
}

// AddGroups adds src's groups into dst, matching families by name and
// counters by key (the same component on two queues), appending what dst
// lacks in src's order, and returns dst. It copies what it appends.
func AddGroups(dst []Group, src ...Group) []Group {
	for _, g := range src {
		j := -1
		for i := range dst {
			if dst[i].Name == g.Name {
				j = i
				break
			}
		}
		if j < 0 {
			dst = append(dst, Group{Decl: g.Decl, Values: append([]KeyValue(nil), g.Values...)})
			continue
		}
		d := &dst[j]
		for _, kv := range g.Values {
			k := -1
			for i := range d.Values {
				if d.Values[i].Key == kv.Key {
					k = i
					break
				}
			}
			if k < 0 {
				d.Values = append(d.Values, kv)
				continue
			}
			d.Values[k].Value += kv.Value
			d.Values[k].Bytes += kv.Bytes
		}
	}
	return dst
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
