package daemon

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

func TestExampleConfigIsValid(t *testing.T) {
	c, err := LoadConfig("../../cmd/warpflowd/warpflowd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("the shipped example config is invalid:\n%v", err)
	}
	if len(c.Interfaces) != 2 || c.Interfaces[1].Receives() || !c.Interfaces[0].Receives() {
		t.Errorf("interfaces = %+v, want eth0 receiving and eth1 transmit-only", c.Interfaces)
	}
	if c.Ports["out0"] != "eth1" || time.Duration(c.StatsInterval) != 10*time.Second {
		t.Errorf("ports %v, stats_interval %v", c.Ports, time.Duration(c.StatsInterval))
	}
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		want       []string // each must appear, in order, one per line
	}{
		{"unknown key", "pipeline: p.yaml\ninterfaces:\n  - name: dp0\n    atach: native\n",
			[]string{`d.yaml:4: unknown key "atach"`}},
		{"wrong type", "pipeline: p.yaml\ninterfaces:\n  - name: dp0\nworkers_per_queue: many\n",
			[]string{"d.yaml:4: cannot unmarshal a string `many` into int"}},
		{"bad duration", "pipeline: p.yaml\ninterfaces: [{name: dp0}]\nstats_interval: soon\n",
			[]string{"d.yaml:3:", `duration "soon"`}},
		{"two documents", "pipeline: p.yaml\n---\npipeline: q.yaml\n", []string{"d.yaml:2: config must be a single YAML document"}},
		{"empty", "", []string{"d.yaml:1: empty config"}},
		{"syntax", "pipeline: [p.yaml\n", []string{"d.yaml:"}},
		{"every value problem at once", strings.Join([]string{
			"pipeline: p.yaml",
			"interfaces:",
			"  - name: dp0",
			"    attach: fast",
			"    bind: zero",
			"    queues: [0, 0, 2000]",
			"  - name: dp0",
			"ports: {out0: nowhere}",
			"umem: {frames: 10, frame_size: 1000}",
			"rings: {rx: 100}",
			"on_link_loss: panic",
			"log: {format: xml, level: loud}",
			"pass: maybe",
		}, "\n") + "\n", []string{
			`d.yaml:4: interface "dp0": attach "fast"`,
			`d.yaml:5: interface "dp0": bind "zero"`,
			`d.yaml:6: interface "dp0": queue 0 listed twice`,
			`d.yaml:6: interface "dp0": queue 2000`,
			`d.yaml:7: interface "dp0": listed twice`,
			`d.yaml:8: ports: out0 -> "nowhere"`,
			`d.yaml:9: umem.frame_size 1000`,
			`d.yaml:9: umem.frames 10`,
			`d.yaml:10: rings.rx 100`,
			`d.yaml:11: on_link_loss "panic"`,
			`d.yaml:12: log.format "xml"`,
			`d.yaml:12: log.level "loud"`,
			`d.yaml:13: pass "maybe"`,
		}},
		{"missing essentials", "log: {level: debug}\n", []string{"d.yaml: pipeline: required", "d.yaml: interfaces: at least one"}},
		{"none receives", "pipeline: p.yaml\ninterfaces: [{name: a, receive: false}]\n", []string{"d.yaml:2: interfaces: none receives"}},
		{"control paths", "pipeline: p.yaml\ninterfaces: [{name: a}]\ncontrol: {token_file: /run/x/../t}\ncapture_dir: captures\n",
			[]string{`d.yaml:3: control.token_file "/run/x/../t": want a clean absolute path`, `d.yaml:4: capture_dir "captures": want a clean absolute path`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseConfig("d.yaml", []byte(tc.yaml))
			if err == nil {
				err = c.Validate()
			}
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("err = %v (%T), want a *ConfigError", err, err)
			}
			got := err.Error()
			for _, w := range tc.want {
				i := strings.Index(got, w)
				if i < 0 {
					t.Fatalf("error lacks %q:\n%s", w, err)
				}
				got = got[i+len(w):]
			}
		})
	}
}

func TestPipelinePathIsRelativeToTheConfig(t *testing.T) {
	c, err := ParseConfig("/etc/warpflow/d.yaml", []byte("pipeline: p.yaml\ninterfaces: [{name: a}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.PipelinePath(); got != "/etc/warpflow/p.yaml" {
		t.Errorf("PipelinePath = %q", got)
	}
	c.Pipeline = "/abs/p.yaml"
	if got := c.PipelinePath(); got != "/abs/p.yaml" {
		t.Errorf("PipelinePath = %q", got)
	}
}

func FuzzParseConfig(f *testing.F) {
	if data, err := os.ReadFile("../../cmd/warpflowd/warpflowd.yaml"); err == nil {
		f.Add(data)
	}
	f.Add([]byte("pipeline: p\ninterfaces: [{name: a, queues: [1]}]\n"))
	f.Add([]byte("umem: {frames: -1}\nrings: {rx: 0}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig("f.yaml", data)
		if err == nil {
			_ = c.Validate() // must not panic
		}
	})
}
