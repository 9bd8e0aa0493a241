package pipelines

import (
	"errors"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

func TestParseSpec(t *testing.T) {
	s, err := Parse("p.yaml", []byte(`# comment
name: edge-1
settings:
  batch_size: 256
  workers: 0
stages:
  - name: a
    type: filter
    next: out
    default: accept
  - {name: out, type: tx, port: eth0}
`))
	if err != nil {
		t.Fatal(err)
	}
	if s.File != "p.yaml" || s.Name != "edge-1" {
		t.Errorf("file/name = %q/%q", s.File, s.Name)
	}
	if want := (Settings{BatchSize: 256, Workers: 0}); s.Settings != want {
		t.Errorf("settings = %+v, want %+v", s.Settings, want)
	}
	if len(s.Stages) != 2 {
		t.Fatalf("%d stages", len(s.Stages))
	}
	a := s.Stages[0]
	if a.Name != "a" || a.Type != "filter" || a.Next != "out" {
		t.Errorf("stage a = %+v", a)
	}
	if a.Pos != (Pos{"p.yaml", 7, 5}) || a.NamePos != (Pos{"p.yaml", 7, 11}) || a.TypePos != (Pos{"p.yaml", 8, 11}) || a.NextPos != (Pos{"p.yaml", 9, 11}) {
		t.Errorf("positions = %v %v %v %v", a.Pos, a.NamePos, a.TypePos, a.NextPos)
	}
	if mappingValue(a.Node, "default").Value != "accept" {
		t.Error("options not kept in Node")
	}
	if s.Stages[1].Next != "" || s.Stages[1].NextPos != (Pos{}) {
		t.Errorf("out has next %q", s.Stages[1].Next)
	}
}

func TestParseDefaults(t *testing.T) {
	for _, src := range []string{
		"name: p\nstages: [{name: a, type: pass}]\n",
		"name: p\nsettings:\nstages: [{name: a, type: pass}]\n",
		"name: p\nsettings: {}\nstages: [{name: a, type: pass}]\n",
	} {
		s, err := Parse("p.yaml", []byte(src))
		if err != nil {
			t.Fatalf("%q: %v", src, err)
		}
		if s.Settings != DefaultSettings() || s.Settings != (Settings{BatchSize: 64, Workers: 1}) {
			t.Errorf("%q: settings = %+v", src, s.Settings)
		}
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name, src, want string
	}{
		{"empty", "", "c.yaml:1:1: empty config: want a mapping with name, settings and stages"},
		{"comments only", "# nothing\n", "c.yaml:1:1: empty config: want a mapping with name, settings and stages"},
		// The column of the token where parsing failed (goccy/go-yaml's
		// position: yaml.v3 gives none, and the block's first line).
		{"syntax", "name: p\nstages:\n  - {name: a\n  - b\n", "c.yaml:4:3: yaml: ',' or '}' must be specified"},
		{"tab indent", "name: p\nstages:\n\t- a\n", `c.yaml:3:1: yaml: found character '\t' that cannot start any token`},
		{"unclosed quote", "name: \"p\nstages: []\n", "c.yaml:1:7: yaml: could not find end character of double-quoted text"},
		{"bad indent", "name: p\nstages:\n  - name: a\n    type: parse\n  - name: b\n   type: tx\n", "c.yaml:6:4: yaml: value is not allowed in this context"},
		{"two documents", "name: p\n---\nname: q\n", "c.yaml:2:1: config must be a single YAML document"},
		{"not a mapping", "- a\n- b\n", "c.yaml:1:1: config must be a mapping with name, settings and stages, got a list"},
		{"unknown keys", "name: p\nstage: []\nsettings: {batch: 3, workers: 2}\nstages: [{name: a, type: pass}]\n",
			`c.yaml:2:1: unknown key "stage" (known: name, settings, stages)
c.yaml:3:12: unknown setting "batch" (known: batch_size, workers, backend)`},
		{"wrong types", "name: [p]\nsettings: {batch_size: 1.5, workers: yes}\nstages: {a: b}\n",
			`c.yaml:1:7: name: want a string, got a list
c.yaml:2:24: settings.batch_size: want an integer, got number 1.5
c.yaml:2:38: settings.workers: want an integer, got "yes"
c.yaml:3:9: stages: want a list of stages, got a mapping`},
		{"settings not a mapping", "name: p\nsettings: 5\nstages: [{name: a, type: pass}]\n",
			"c.yaml:2:11: settings: want a mapping, got integer 5"},
		{"stage shapes", "name: p\nstages:\n  - pass\n  - {name: {a: 1}, type: [x], next: ~}\n",
			`c.yaml:3:5: stage: want a mapping with name and type, got "pass"
c.yaml:4:12: name: want a string, got a mapping
c.yaml:4:26: type: want a string, got a list
c.yaml:4:37: next: want a string, got null`},
		{"duplicate keys", "name: p\nname: q\nstages:\n  - {name: a, type: pass, name: b}\n",
			`c.yaml:2:1: duplicate key "name" (first at line 1)
c.yaml:4:27: stage "a": duplicate key "name" (first at line 4)`},
		{"aliases", "name: &n p\nstages:\n  - {name: *n, type: pass}\n",
			`c.yaml:1:7: yaml anchor "&n": anchors and aliases are not supported in pipeline configs`},
		{"alias without anchor", "name: p\nstages:\n  - {name: *n, type: pass}\n",
			`c.yaml:3:12: yaml alias "*n": anchors and aliases are not supported in pipeline configs`},
		{"huge integer", "name: p\nsettings: {batch_size: 99999999999999999999}\nstages: [{name: a, type: pass}]\n",
			"c.yaml:2:24: settings.batch_size: want an integer, got number 99999999999999999999"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("c.yaml", []byte(tt.src))
			if err == nil {
				t.Fatalf("no error, want:\n%s", tt.want)
			}
			var el *ErrorList
			if !errors.As(err, &el) {
				t.Fatalf("%T is not an *ErrorList", err)
			}
			if got := err.Error(); got != tt.want {
				t.Errorf("got:\n%s\nwant:\n%s", got, tt.want)
			}
		})
	}
}

// TestLoadReportsParseErrorsOnce: Load runs Compile on what Parse
// understood, and a problem both find appears once.
func TestLoadReportsParseErrorsOnce(t *testing.T) {
	_, err := Load("c.yaml", []byte("name: p\nsettings: {workers: x}\nstages:\n  - {name: a, type: pass, port: 1}\n  - {name: a, type: tx}\n"))
	want := `c.yaml:2:21: settings.workers: want an integer, got "x"
c.yaml:4:27: stage "a": unknown option "port" (none accepted here)
c.yaml:5:5: stage "a": tx stage needs a port option
c.yaml:5:12: stage "a": duplicate stage name (first defined at line 4)`
	if err == nil || err.Error() != want {
		t.Errorf("got:\n%v\nwant:\n%s", err, want)
	}
	if strings.Count(err.Error(), "workers") != 1 {
		t.Error("parse error repeated")
	}
}

// TestDecodeNodePointerFields: DecodeNode hands *yaml.Node fields the
// option's node (yaml.v3 alone refuses them) and decodes the rest.
func TestDecodeNodePointerFields(t *testing.T) {
	s, err := Parse("d.yaml", []byte("name: p\nstages:\n  - {name: a, type: x, to: [b, c], n: 3}\n"))
	if err != nil {
		t.Fatal(err)
	}
	c := &BuildContext{Name: "a", File: "d.yaml", Node: s.Stages[0].Node, errs: &ErrorList{}, common: []string{"name", "type", "next"}}
	var o struct {
		To      *yaml.Node `yaml:"to"`
		Missing *yaml.Node `yaml:"missing"`
		N       int        `yaml:"n"`
	}
	if !c.Decode(&o) {
		t.Fatalf("decode: %v", c.errs)
	}
	if o.To == nil || o.To.Kind != yaml.SequenceNode || len(o.To.Content) != 2 || o.To.Line != 3 || o.Missing != nil || o.N != 3 {
		t.Errorf("decoded %+v", o)
	}
	var bad struct {
		N int `yaml:"n"`
	}
	if c.Decode(&bad) || c.errs.Error() != `d.yaml:3:24: stage "a": unknown option "to" (known: n)` {
		t.Errorf("strictness lost: %v", c.errs)
	}
}
