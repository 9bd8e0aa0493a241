package counters

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

var (
	hits  = Decl{Name: "rule", Unit: "packets", Bytes: true, Label: "rule", Help: "Hits per rule."}
	total = Decl{Name: "total", Unit: "packets", Bytes: true, Help: "Packets."}
	level = Decl{Name: "entries", Kind: Gauge, Help: "Flows in the table."}
)

func TestDeclCheck(t *testing.T) {
	for _, d := range []Decl{hits, total, level} {
		if err := d.Check(); err != nil {
			t.Errorf("%s: %v", d.Name, err)
		}
	}
	for _, c := range []struct {
		d    Decl
		want string
	}{
		{Decl{Name: "Rule", Help: "x"}, "snake_case"},
		{Decl{Name: "rule_", Help: "x"}, "snake_case"},
		{Decl{Name: "r", Unit: "Pkts", Help: "x"}, "unit"},
		{Decl{Name: "packets", Unit: "packets", Help: "x"}, "the name says it"},
		{Decl{Name: "rx_packets", Unit: "packets", Help: "x"}, "the name says it"},
		{Decl{Name: "r", Label: "queue", Help: "x"}, "exporters set it"},
		{Decl{Name: "r", Bytes: true, Help: "x"}, "bytes"},
		{Decl{Name: "r", Kind: Gauge, Unit: "packets", Bytes: true, Help: "x"}, "bytes"},
		{Decl{Name: "r"}, "help"},
		{Decl{Name: "r", Help: "two\nlines"}, "help"},
		{Decl{Name: "r", Kind: 7, Help: "x"}, "kind"},
	} {
		if err := c.d.Check(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error about %s", c.d, err, c.want)
		}
	}
}

func TestLayoutCheck(t *testing.T) {
	ok := NewLayout(Single(total), Keyed(hits, []string{"default", "0", "1"}), Single(level))
	if err := ok.Check(); err != nil {
		t.Fatal(err)
	}
	if ok.Len() != 5 || ok.At(1) != 1 || ok.At(2) != 4 {
		t.Fatalf("len %d, at %d %d", ok.Len(), ok.At(1), ok.At(2))
	}
	folded := Keyed(hits, []string{"default", "0", OtherKey})
	folded.Fold = 1
	for _, l := range []*Layout{
		NewLayout(Single(total), Single(total)),
		NewLayout(Keyed(total, []string{"a"})),
		NewLayout(Single(hits)),
		NewLayout(Keyed(hits, []string{})),
		NewLayout(Keyed(hits, []string{"a", "a"})),
		NewLayout(Keyed(hits, []string{""})),
		NewLayout(folded),
	} {
		if l.Check() == nil {
			t.Errorf("%+v: no error", l.Families())
		}
	}
}

// TestGroups: a family of one counter shows always, a keyed one the keys
// that counted, folded keys marked; AddGroups sums two components' groups
// by name and key and leaves its sources alone.
func TestGroups(t *testing.T) {
	f := Keyed(hits, []string{"default", "0", "1", "2"})
	f.Fold = 3
	l := NewLayout(Single(level), f, Single(total))
	vals := make([]Value, l.Len())
	vals[l.At(1)+0] = Value{Value: 5, Bytes: 320}
	vals[l.At(1)+3] = Value{Value: 2, Bytes: 128}
	g := l.Groups(vals)
	want := []Group{
		{Decl: level, Values: []KeyValue{{}}},
		{Decl: hits, Values: []KeyValue{{Key: "default", Value: 5, Bytes: 320}, {Key: "2", Value: 2, Bytes: 128, Folded: true}}},
		{Decl: total, Values: []KeyValue{{}}},
	}
	if !reflect.DeepEqual(g, want) {
		t.Fatalf("groups\n got %+v\nwant %+v", g, want)
	}
	if g[1].Text(g[1].Values[0]) != "rule=default" || g[0].Text(g[0].Values[0]) != "entries" {
		t.Errorf("text %q %q", g[1].Text(g[1].Values[0]), g[0].Text(g[0].Values[0]))
	}
	other := []Group{{Decl: hits, Values: []KeyValue{{Key: "0", Value: 1}, {Key: "default", Value: 1, Bytes: 64}}}}
	sum := AddGroups(AddGroups(nil, g...), other...)
	if got := sum[1].Values; !reflect.DeepEqual(got, []KeyValue{{Key: "default", Value: 6, Bytes: 384}, {Key: "2", Value: 2, Bytes: 128, Folded: true}, {Key: "0", Value: 1}}) {
		t.Errorf("sum %+v", got)
	}
	if g[1].Values[0].Value != 5 {
		t.Errorf("AddGroups changed its source: %+v", g[1])
	}
}

// TestGroupJSON: the JSON of a group is snake_case and round-trips.
func TestGroupJSON(t *testing.T) {
	g := Group{Decl: level, Values: []KeyValue{{Value: 3}}}
	js, err := json.Marshal(g)
	if err != nil {
		t.Fatal(err)
	}
	if string(js) != `{"name":"entries","kind":"gauge","help":"Flows in the table.","values":[{"value":3}]}` {
		t.Errorf("%s", js)
	}
	var back Group
	if err := json.Unmarshal(js, &back); err != nil || !reflect.DeepEqual(back, g) {
		t.Errorf("round trip: %+v, %v", back, err)
	}
	if err := json.Unmarshal([]byte(`{"kind":"level"}`), &back); err == nil {
		t.Error("an unknown kind decoded")
	}
}

func TestMetricNames(t *testing.T) {
	for _, c := range []struct {
		d                  Decl
		owner, want, bytes string
	}{
		{hits, "filter", "warpflow_filter_rule_packets_total", "warpflow_filter_rule_bytes_total"},
		{level, "conntrack", "warpflow_conntrack_entries", "warpflow_conntrack_entries_bytes_total"},
		{Decl{Name: "kicks"}, "socket", "warpflow_socket_kicks_total", "warpflow_socket_kicks_bytes_total"},
	} {
		if got := c.d.Metric(c.owner); got != c.want {
			t.Errorf("%s: %s, want %s", c.d.Name, got, c.want)
		}
		if got := c.d.BytesMetric(c.owner); got != c.bytes {
			t.Errorf("%s: bytes %s, want %s", c.d.Name, got, c.bytes)
		}
	}
}
