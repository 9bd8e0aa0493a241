package daemon

import (
	"errors"
	"fmt"
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
			[]string{`d.yaml:4: workers_per_queue: want an integer, got "many"`}},
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
			`d.yaml:8: ports: "out0" -> "nowhere"`,
			`d.yaml:9: umem.frame_size 1000`,
			`d.yaml:9: umem.frames 10`,
			`d.yaml:10: rings.rx 100`,
			`d.yaml:11: on_link_loss "panic"`,
			`d.yaml:12: log.format "xml"`,
			`d.yaml:12: log.level "loud"`,
			`d.yaml:13: pass "maybe"`,
		}},
		{"every kind of problem at once", strings.Join([]string{
			"pipeline: p.yaml",
			"interfaces:",
			"  - name: dp0",
			"    atach: native",
			"    queues: [0, zero]",
			"    receive: maybe",
			"  - name: dp0",
			"umem: {frames: 100, franes: 1}",
			"rings: {fill: 2048, tx: 2048}",
			"stats_interval: soon",
			"colour: blue",
			"log: {level: loud}",
			"ports: [out0]",
			"pass: maybe",
			"pass: drop",
			"cpus: 3",
			"---",
			"pipeline: q.yaml",
		}, "\n") + "\n", []string{
			`d.yaml:4: unknown key "atach" in interfaces[0] (known: attach, bind, name, queues, receive)`,
			`d.yaml:5: interfaces[0].queues[1]: want an integer, got "zero"`,
			`d.yaml:6: interfaces[0].receive: want true or false, got "maybe"`,
			`d.yaml:7: interface "dp0": listed twice`,
			`d.yaml:8: unknown key "franes" in umem (known: frame_size, frames, headroom, shared)`,
			`d.yaml:8: umem.frames 100: fewer than rings.fill + rings.tx (4096)`,
			`d.yaml:10: stats_interval: duration "soon": want a value such as 10s or 500ms`,
			`d.yaml:11: unknown key "colour" (known: busy_poll, capture_dir, control,`,
			`d.yaml:12: log.level "loud": want debug, info, warn or error`,
			`d.yaml:13: ports: want a mapping, got a list`,
			`d.yaml:14: pass "maybe": want refuse or drop`,
			`d.yaml:15: duplicate key "pass" (first at line 14)`,
			`d.yaml:16: cpus: want a list, got "3"`,
			`d.yaml:17: config must be a single YAML document`,
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

// TestConfigInputIsBounded: the daemon config is bounded before it is
// decoded, like a pipeline: anchors and aliases are refused at the first
// token (yaml.v3's decoder expands them into Go values, up to its alias
// ratio), and so are deep nesting and oversize input; one error each,
// quoting a short prefix.
func TestConfigInputIsBounded(t *testing.T) {
	var bomb strings.Builder
	bomb.WriteString("pipeline: p.yaml\nlog: {format: text}\nports:\n  a0: &a0 x\n")
	for i := 1; bomb.Len() < 1<<19; i++ {
		fmt.Fprintf(&bomb, "x%d: &a%d [*a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d]\n", i, i, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1)
	}
	for _, tc := range []struct{ name, src, want string }{
		{"anchor", bomb.String(), `d.yaml:4: yaml anchor "&a0": anchors and aliases are not supported in the daemon config`},
		{"alias", "pipeline: p.yaml\nlog: {format: *f}\n", `d.yaml:2: yaml alias "*f": anchors and aliases are not supported in the daemon config`},
		{"depth", "pipeline: " + strings.Repeat("[", 100) + "\n", fmt.Sprintf("d.yaml:1: config refused: nesting deeper than %d levels", MaxConfigDepth)},
		{"size", "pipeline: p.yaml\n" + strings.Repeat("#", MaxConfigBytes), fmt.Sprintf("over the limit of %d bytes", MaxConfigBytes)},
		{"long value", "pipeline: p.yaml\ninterfaces: [{name: a}]\nlog: {level: " + strings.Repeat("x", 100000) + "}\n", `d.yaml:3: log.level "` + strings.Repeat("x", maxEcho) + `"...: want debug`},
	} {
		c, err := ParseConfig("d.yaml", []byte(tc.src))
		if err == nil {
			err = c.Validate()
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) || len(err.Error()) > 500 {
			t.Errorf("%s: err = %.600v\nwant %s", tc.name, err, tc.want)
		}
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
