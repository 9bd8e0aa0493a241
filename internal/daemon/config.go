package daemon

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/warpflow/warpflow/internal/control"
	"github.com/warpflow/warpflow/internal/yamlbound"
	"github.com/warpflow/warpflow/pipelines"
	"go.yaml.in/yaml/v3"
)

// Config is warpflowd's configuration file, plain data. ParseConfig reads
// it strictly (unknown keys, duplicate keys and wrong types are problems
// with file:line) and Validate checks the values; Validate reports every
// problem at once, ParseConfig's with its own. A field is read by its
// yaml tag alone (see decodeStrict): a new field needs its tag, its
// default in DefaultConfig and its check in Validate.
type Config struct {
	// Pipeline is the pipeline file, relative to the config file's directory.
	Pipeline string `yaml:"pipeline"`
	// Interfaces the dataplane uses: each receives (an XDP program and one
	// AF_XDP socket per queue) unless Receive is false.
	Interfaces []InterfaceConfig `yaml:"interfaces"`
	// Ports maps the pipeline's tx port names to interfaces. A port left
	// out goes to the interface of the same name.
	Ports map[string]string `yaml:"ports"`
	// Pass says what the pass verdict does on a live port. AF_XDP has no
	// way to hand a frame it holds back to the kernel's stack, so "refuse"
	// (the default) refuses to run a pipeline that can pass, and "drop"
	// runs it and counts passed packets as drops with reason
	// pass_unsupported.
	Pass string `yaml:"pass"`
	// Offload splits the pipeline between the XDP program and the workers:
	// "auto" (the default) moves the longest prefix of the first filter's
	// rules the kernel can run (drop and pass rules over protocol,
	// addresses, ports, VLAN, TCP flags, fragment); "none" leaves
	// everything to the workers (for debugging). See offload.go.
	Offload string `yaml:"offload"`
	// UMEM sizes each queue's frame memory.
	UMEM UMEMConfig `yaml:"umem"`
	// Rings sizes each socket's rings (powers of two).
	Rings RingsConfig `yaml:"rings"`
	// WorkersPerQueue is the number of worker goroutines behind each
	// queue's I/O loop; 0 runs the pipeline inline in the I/O loop.
	// -1 (the default) takes the pipeline's settings.workers.
	WorkersPerQueue int `yaml:"workers_per_queue"`
	// CPUs pins the queues' I/O loops, in order (and their workers after
	// them). Empty: no pinning.
	CPUs []int `yaml:"cpus"`
	// BusyPoll sets the sockets' busy-poll options where the kernel has
	// them.
	BusyPoll BusyPollConfig `yaml:"busy_poll"`
	// OnLinkLoss is what the daemon does when an interface disappears:
	// "exit" (default: drain, detach and exit non-zero) or "continue"
	// (keep serving the other queues).
	OnLinkLoss string `yaml:"on_link_loss"`
	// StatsInterval logs one stats line per interval; 0 turns it off.
	StatsInterval Duration `yaml:"stats_interval"`
	// Log configures log/slog.
	Log LogConfig `yaml:"log"`
	// TXCopy makes the transmit ports on other interfaces copy each
	// packet into a UMEM of their own instead of sharing the receiving
	// queue's UMEM (for drivers that misbehave with a shared UMEM; without
	// it they copy only where the kernel refuses to share). Copies are
	// counted (tx_copied) and logged.
	TXCopy bool `yaml:"tx_copy"`
	// TrackFrames is the accounting (debug) mode: every frame's owner is
	// recorded at each hand-off (engine, fill ring and kernel, TX ring and
	// kernel), and a frame found in two places stops the queue with an
	// error naming the frame and both places. It costs a few ns per packet.
	TrackFrames bool `yaml:"track_frames"`
	// Control is the control API (warpctl's socket); MetricsAddr serves
	// Prometheus metrics at /metrics ("" off, the default; a bare port
	// listens on loopback); Timing measures each stage's time for stats'
	// ns/packet (one clock read per stage per batch).
	Control     ControlConfig `yaml:"control"`
	MetricsAddr string        `yaml:"metrics_addr"`
	Timing      bool          `yaml:"timing"`
	// CaptureDir is the one directory the daemon writes files in for a
	// client (captures): a client names a file, never a path, and the file
	// is made beneath this directory (internal/trust.Room). Made 0750
	// (with the socket group, setgid, when one is configured) where
	// missing; every component must be owned by root or the daemon's user
	// and writable by nobody else, and none may be a link.
	CaptureDir string `yaml:"capture_dir"`
	// SampleMaxBytes bounds each sample stage's file (capture_dir/samples/
	// NAME): at this size the daemon moves it to NAME.1, replacing the one
	// before, and starts NAME again (samples.go).
	SampleMaxBytes int64 `yaml:"sample_max_bytes"`
	// Watch follows the pipeline file: its directory is watched (a
	// Kubernetes ConfigMap volume swaps a ..data symlink), and a changed
	// file is validated and swapped in live; an invalid one is refused
	// and the running pipeline kept (watch.go).
	Watch bool `yaml:"watch"`

	// File is where the config was read from ("" for flags only).
	File string `yaml:"-"`
	// lines maps a key path ("interfaces[0].attach") to its line in File.
	lines map[string]int
	// problems are what ParseConfig found in the file's keys and types,
	// as file:line: message; Validate reports them with its own.
	problems []string
}

// InterfaceConfig is one interface.
type InterfaceConfig struct {
	Name string `yaml:"name"`
	// Queues lists the receive queues to serve; empty means every queue.
	Queues []int `yaml:"queues"`
	// Attach is the XDP attach mode: auto (native, else generic), native
	// or generic.
	Attach string `yaml:"attach"`
	// Bind is the AF_XDP bind mode: auto (zero-copy, else copy), zerocopy
	// or copy.
	Bind string `yaml:"bind"`
	// Receive, when false, makes the interface transmit only (no XDP
	// program); default true.
	Receive *bool `yaml:"receive"`
}

// Receives reports whether the interface receives.
func (i InterfaceConfig) Receives() bool { return i.Receive == nil || *i.Receive }

// ControlConfig is the control API's listener: a unix socket (mode 0600,
// or 0660 with Group, in a directory the group may search), and TCP only
// when TCP is set (a bare port listens on loopback). Over TCP, every
// request that changes something needs the bearer token in TokenFile
// (default: control.token in the socket's directory, made 0600 at the
// first start).
type ControlConfig struct {
	Socket    string `yaml:"socket"`
	Group     string `yaml:"group"`
	TCP       string `yaml:"tcp"`
	TokenFile string `yaml:"token_file"`
}

// The bounds of sample_max_bytes.
const (
	minSampleMaxBytes = 64 << 10
	maxSampleMaxBytes = 1 << 40
)

// DefaultCaptureDir is where captures go unless configured otherwise.
const DefaultCaptureDir = control.DefaultCaptureDir

// UMEMConfig sizes one queue's UMEM.
type UMEMConfig struct {
	Frames    int `yaml:"frames"`
	FrameSize int `yaml:"frame_size"`
	Headroom  int `yaml:"headroom"`
	// Shared maps one UMEM per receiving interface, shared by all its
	// queues' sockets (XDP_SHARED_UMEM) and split into one arena per
	// queue, instead of one UMEM per queue.
	Shared bool `yaml:"shared"`
}

// RingsConfig sizes one socket's rings.
type RingsConfig struct {
	RX         int `yaml:"rx"`
	TX         int `yaml:"tx"`
	Fill       int `yaml:"fill"`
	Completion int `yaml:"completion"`
}

// BusyPollConfig are the socket busy-poll options.
type BusyPollConfig struct {
	Prefer bool `yaml:"prefer"`
	Usec   int  `yaml:"usec"`
	Budget int  `yaml:"budget"`
}

// LogConfig configures logging.
type LogConfig struct {
	Format string `yaml:"format"` // text or json
	Level  string `yaml:"level"`  // debug, info, warn, error
}

// Duration is a time.Duration written as "10s", "500ms" in YAML.
type Duration time.Duration

// UnmarshalYAML parses a Go duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("want a duration such as 10s, got %s", describe(n))
	}
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("duration %s: want a value such as 10s or 500ms", pipelinesQuote(n.Value))
	}
	*d = Duration(v)
	return nil
}

// DefaultConfig returns the defaults every field starts from.
func DefaultConfig() Config {
	return Config{
		Pass:            "refuse",
		Offload:         "auto",
		UMEM:            UMEMConfig{Frames: 4096, FrameSize: 4096, Headroom: 0},
		Rings:           RingsConfig{RX: 2048, TX: 2048, Fill: 2048, Completion: 2048},
		WorkersPerQueue: -1,
		OnLinkLoss:      "exit",
		StatsInterval:   Duration(10 * time.Second),
		Log:             LogConfig{Format: "text", Level: "info"},
		Control:         ControlConfig{Socket: "/run/warpflow/warpflowd.sock"},
		CaptureDir:      DefaultCaptureDir,
		SampleMaxBytes:  DefaultSampleMaxBytes,
	}
}

// ConfigError is every problem found in a config, one per line, each with
// its file and line when it has one.
type ConfigError struct{ Problems []string }

func (e *ConfigError) Error() string { return strings.Join(e.Problems, "\n") }

// Limits on the config file's YAML, checked over the raw bytes before it
// is decoded (internal/yamlbound): the example config is 3 KB, 300 nodes,
// depth 3.
const (
	MaxConfigBytes = 1 << 20
	MaxConfigDepth = 16
	MaxConfigNodes = 100_000
)

// maxEcho is how much of a value from the file a problem quotes.
const maxEcho = 40

// LoadConfig reads path over DefaultConfig (see ParseConfig). It reads at
// most MaxConfigBytes and one more.
func LoadConfig(path string) (Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return Config{}, fmt.Errorf("read config: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxConfigBytes+1))
	if err != nil {
		return Config{}, fmt.Errorf("read config: %w", err)
	}
	return ParseConfig(path, data)
}

var yamlLineRE = regexp.MustCompile(`line (\d+): (.*)`)

// ParseConfig decodes data (read from file) strictly over DefaultConfig.
//
// It returns an error, a *ConfigError of one line, only for a file it
// cannot read as a config at all: over the input limits (size, an anchor
// or alias, nesting, nodes: refused before anything is decoded), a YAML
// syntax error, an empty file, or a document that is not a mapping.
// Everything else it finds (unknown keys, duplicate keys, values of the
// wrong type, a second document) it keeps in the Config, reading every key
// it can, and Validate reports it together with the value checks, so that
// every problem in the file is reported at once. A Config with such
// problems never validates: callers must call Validate (daemon.New does).
func ParseConfig(file string, data []byte) (Config, error) {
	c := DefaultConfig()
	c.File = file
	fatal := func(line int, msg string) (Config, error) {
		return c, &ConfigError{[]string{fmt.Sprintf("%s:%d: %s", file, max(line, 1), msg)}}
	}
	st, err := yamlbound.Check(data, yamlbound.Limits{MaxBytes: MaxConfigBytes, MaxDepth: MaxConfigDepth, MaxNodes: MaxConfigNodes})
	if err != nil {
		var be *yamlbound.Error
		if errors.As(err, &be) {
			if be.Limit == yamlbound.LimitAnchor {
				return fatal(be.Line, be.Msg+" in the daemon config")
			}
			return fatal(be.Line, "config refused: "+be.Msg)
		}
		return c, err
	}
	var root yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			return fatal(1, "empty config: want a mapping with pipeline and interfaces")
		}
		return c, yamlConfigError(file, err)
	}
	if len(root.Content) != 1 || root.Content[0].Kind != yaml.MappingNode {
		n := &root
		if len(root.Content) == 1 {
			n = root.Content[0]
		}
		if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
			return fatal(n.Line, "empty config: want a mapping with pipeline and interfaces")
		}
		return fatal(n.Line, "config must be a mapping with pipeline and interfaces, got "+describe(n))
	}
	d := &strictDecoder{file: file, lines: map[string]int{}}
	if st.Documents > 1 {
		d.problem(st.SecondDocLine, "config must be a single YAML document")
	}
	d.decode(root.Content[0], reflect.ValueOf(&c).Elem(), "")
	c.lines, c.problems = d.lines, d.problems
	return c, nil
}

// strictDecoder decodes a node tree into a Go value field by field, by
// yaml tags, keeping going after a problem so that every problem is found
// in one pass (yaml.v3's Decoder reports unknown fields and type errors
// of one decode, but stops the whole decode at the first error an
// UnmarshalYAML returns, and has no duplicate-key check on structs it
// fills). It never follows an alias: the bounded reader refused them.
type strictDecoder struct {
	file     string
	lines    map[string]int
	problems []string
}

func (d *strictDecoder) problem(line int, format string, args ...any) {
	d.problems = append(d.problems, capProblem(fmt.Sprintf("%s:%d: %s", d.file, line, fmt.Sprintf(format, args...))))
}

// maxProblemBytes bounds one problem line: messages quote values short
// (maxEcho), and this holds for any that do not.
const maxProblemBytes = 400

func capProblem(p string) string {
	if len(p) <= maxProblemBytes {
		return p
	}
	cut := maxProblemBytes
	for cut > 0 && !utf8.RuneStart(p[cut]) {
		cut--
	}
	return p[:cut] + "... (message cut)"
}

var unmarshalerType = reflect.TypeOf((*yaml.Unmarshaler)(nil)).Elem()

// decode fills v (addressable) from n; path names v for lines and
// messages ("" for the root, "umem.frames", "interfaces[0].name").
func (d *strictDecoder) decode(n *yaml.Node, v reflect.Value, path string) {
	name := path
	if name == "" {
		name = "config"
	}
	null := n.Kind == yaml.ScalarNode && n.Tag == "!!null"
	if v.Addr().Type().Implements(unmarshalerType) {
		if err := n.Decode(v.Addr().Interface()); err != nil {
			d.problem(n.Line, "%s: %s", name, cleanTypeMsg(strings.TrimPrefix(yamlLineRE.ReplaceAllString(err.Error(), "$2"), "yaml: ")))
		}
		return
	}
	switch v.Kind() {
	case reflect.Struct:
		if null {
			return // "umem:" with nothing under it: the defaults
		}
		if n.Kind != yaml.MappingNode {
			d.problem(n.Line, "%s: want a mapping, got %s", name, describe(n))
			return
		}
		fields, known := structFields(v.Type())
		seen := map[string]int{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, val := n.Content[i], n.Content[i+1]
			kpath := k.Value
			if path != "" {
				kpath = path + "." + k.Value
			}
			if first, dup := seen[k.Value]; dup {
				d.problem(k.Line, "duplicate key %s (first at line %d)", pipelinesQuote(k.Value), first)
				continue
			}
			seen[k.Value] = k.Line
			f, ok := fields[k.Value]
			if !ok {
				where := ""
				if path != "" {
					where = " in " + path
				}
				d.problem(k.Line, "unknown key %s%s (known: %s)", pipelinesQuote(k.Value), where, known)
				continue
			}
			d.lines[kpath] = k.Line
			d.decode(val, v.FieldByIndex(f), kpath)
		}
	case reflect.Slice:
		if null {
			v.SetZero()
			return
		}
		if n.Kind != yaml.SequenceNode {
			d.problem(n.Line, "%s: want a list, got %s", name, describe(n))
			return
		}
		// An element that is a scalar of the wrong type is left out
		// (reported): a zero in its place would be checked as a value.
		scalar := v.Type().Elem().Kind() != reflect.Struct
		out := reflect.MakeSlice(v.Type(), 0, len(n.Content))
		for i, item := range n.Content {
			ipath := fmt.Sprintf("%s[%d]", path, i)
			d.lines[ipath] = item.Line
			e := reflect.New(v.Type().Elem()).Elem()
			before := len(d.problems)
			d.decode(item, e, ipath)
			if !scalar || len(d.problems) == before {
				out = reflect.Append(out, e)
			}
		}
		v.Set(out)
	case reflect.Map:
		if null {
			v.SetZero()
			return
		}
		if n.Kind != yaml.MappingNode {
			d.problem(n.Line, "%s: want a mapping, got %s", name, describe(n))
			return
		}
		v.Set(reflect.MakeMapWithSize(v.Type(), len(n.Content)/2))
		seen := map[string]int{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, val := n.Content[i], n.Content[i+1]
			if first, dup := seen[k.Value]; dup {
				d.problem(k.Line, "%s: duplicate key %s (first at line %d)", name, pipelinesQuote(k.Value), first)
				continue
			}
			seen[k.Value] = k.Line
			kpath := path + "." + k.Value
			d.lines[kpath] = k.Line
			kv, ev := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
			if k.Kind != yaml.ScalarNode || k.Decode(kv.Addr().Interface()) != nil {
				d.problem(k.Line, "%s: key %s: want a string", name, describe(k))
				continue
			}
			before := len(d.problems)
			d.decode(val, ev, kpath)
			if len(d.problems) == before {
				v.SetMapIndex(kv, ev)
			}
		}
	case reflect.Pointer:
		if null {
			v.SetZero()
			return
		}
		p := reflect.New(v.Type().Elem())
		before := len(d.problems)
		d.decode(n, p.Elem(), path)
		if len(d.problems) == before {
			v.Set(p)
		}
	default: // string, bool, numbers
		if n.Kind != yaml.ScalarNode {
			d.problem(n.Line, "%s: want %s, got %s", name, scalarWant(v.Kind()), describe(n))
			return
		}
		if err := n.Decode(v.Addr().Interface()); err != nil {
			d.problem(n.Line, "%s: want %s, got %s", name, scalarWant(v.Kind()), describe(n))
		}
	}
}

// structFields maps a struct's yaml keys to field indexes, and lists the
// keys for messages.
func structFields(t reflect.Type) (map[string][]int, string) {
	fields := map[string][]int{}
	var keys []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if !f.IsExported() || name == "-" || name == "" {
			continue
		}
		fields[name] = f.Index
		keys = append(keys, name)
	}
	sort.Strings(keys)
	return fields, strings.Join(keys, ", ")
}

func scalarWant(k reflect.Kind) string {
	switch k {
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	}
	return "a string"
}

// describe names a node for a message, quoting at most maxEcho bytes of
// a scalar.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "null"
		}
		return pipelinesQuote(n.Value)
	}
	return "nothing"
}

// pipelinesQuote quotes a value from the file, at most maxEcho bytes of it.
func pipelinesQuote(s string) string { return yamlbound.Quote(s, maxEcho) }

// yamlConfigError turns yaml.v3's "yaml: line N: msg" into file:N: msg.
func yamlConfigError(file string, err error) error {
	m := strings.TrimPrefix(err.Error(), "yaml: ")
	if g := yamlLineRE.FindStringSubmatch(m); g != nil {
		n, _ := strconv.Atoi(g[1])
		return &ConfigError{[]string{fmt.Sprintf("%s:%d: %s", file, n, cleanTypeMsg(g[2]))}}
	}
	return &ConfigError{[]string{file + ": " + m}}
}

// cleanTypeMsg rewrites yaml.v3's Go-flavoured words for users.
func cleanTypeMsg(m string) string {
	m = strings.ReplaceAll(m, "!!str", "a string")
	m = strings.ReplaceAll(m, "!!int", "an integer")
	m = strings.ReplaceAll(m, "!!seq", "a list")
	m = strings.ReplaceAll(m, "!!map", "a mapping")
	return m
}

// at returns "file:line" for key path, or the file (or "flags") alone when
// the path was not in the file (a default or a flag).
func (c Config) at(path string) string {
	if c.File == "" {
		return "flags"
	}
	if n, ok := c.lines[path]; ok {
		return fmt.Sprintf("%s:%d", c.File, n)
	}
	return c.File
}

// PipelinePath is the pipeline file's path resolved against the config
// file's directory.
func (c Config) PipelinePath() string {
	if c.Pipeline == "" || filepath.IsAbs(c.Pipeline) || c.File == "" {
		return c.Pipeline
	}
	return filepath.Join(filepath.Dir(c.File), c.Pipeline)
}

var ifaceNameRE = regexp.MustCompile(`^[A-Za-z0-9_.:@-]{1,15}$`)

// Validate checks every value and returns all problems at once: those
// ParseConfig found in the file's keys and types, then every value and
// conflict, sorted by line.
func (c Config) Validate() error {
	p := append([]string(nil), c.problems...)
	add := func(path, format string, args ...any) {
		p = append(p, capProblem(c.at(path)+": "+fmt.Sprintf(format, args...)))
	}
	if c.Pipeline == "" {
		add("pipeline", "pipeline: required (the pipeline file to run)")
	}
	if len(c.Interfaces) == 0 {
		add("interfaces", "interfaces: at least one interface is required")
	}
	seen := map[string]bool{}
	receivers := 0
	for i, in := range c.Interfaces {
		ipath := fmt.Sprintf("interfaces[%d]", i)
		name := ipath
		if in.Name != "" {
			name = "interface " + pipelinesQuote(in.Name)
		}
		switch {
		case in.Name == "":
			add(ipath, "%s: name is required", name)
		case !ifaceNameRE.MatchString(in.Name):
			add(ipath+".name", "%s: not a valid interface name", name)
		case seen[in.Name]:
			add(ipath+".name", "%s: listed twice", name)
		}
		seen[in.Name] = true
		if in.Receives() {
			receivers++
		}
		switch in.Attach {
		case "", "auto", "native", "generic":
		default:
			add(ipath+".attach", "%s: attach %s: want auto, native or generic", name, pipelinesQuote(in.Attach))
		}
		switch in.Bind {
		case "", "auto", "zerocopy", "copy":
		default:
			add(ipath+".bind", "%s: bind %s: want auto, zerocopy or copy", name, pipelinesQuote(in.Bind))
		}
		qs := map[int]bool{}
		for _, q := range in.Queues {
			if q < 0 || q > 1023 {
				add(ipath+".queues", "%s: queue %d: want 0..1023", name, q)
			}
			if qs[q] {
				add(ipath+".queues", "%s: queue %d listed twice", name, q)
			}
			qs[q] = true
		}
	}
	if len(c.Interfaces) > 0 && receivers == 0 {
		add("interfaces", "interfaces: none receives (every one has receive: false)")
	}
	for port, iface := range c.Ports {
		if !seen[iface] {
			add("ports."+port, "ports: %s -> %s: not one of the interfaces", pipelinesQuote(port), pipelinesQuote(iface))
		}
	}
	if _, err := pipelines.ParseOffloadMode(c.Offload); err != nil {
		add("offload", "%v", err)
	}
	switch c.Pass {
	case "refuse", "drop":
	default:
		add("pass", "pass %s: want refuse or drop", pipelinesQuote(c.Pass))
	}
	u := c.UMEM
	if u.FrameSize != 2048 && u.FrameSize != 4096 {
		add("umem.frame_size", "umem.frame_size %d: want 2048 or 4096", u.FrameSize)
	}
	if u.Frames < 64 || u.Frames > 1<<20 {
		add("umem.frames", "umem.frames %d: want 64..%d", u.Frames, 1<<20)
	}
	if maxHead := u.FrameSize/2 - 256 - 1; u.Headroom < 0 || u.Headroom > maxHead {
		add("umem.headroom", "umem.headroom %d: want 0..%d (the kernel adds 256 bytes of its own)", u.Headroom, max(maxHead, 0))
	}
	for _, r := range []struct {
		name string
		v    int
	}{{"rings.rx", c.Rings.RX}, {"rings.tx", c.Rings.TX}, {"rings.fill", c.Rings.Fill}, {"rings.completion", c.Rings.Completion}} {
		if r.v < 64 || r.v > 1<<16 || r.v&(r.v-1) != 0 {
			add(r.name, "%s %d: want a power of two in 64..65536", r.name, r.v)
		}
	}
	if c.Rings.Fill+c.Rings.TX > u.Frames && u.Frames >= 64 {
		add("umem.frames", "umem.frames %d: fewer than rings.fill + rings.tx (%d); the fill ring could never be kept full", u.Frames, c.Rings.Fill+c.Rings.TX)
	}
	if c.WorkersPerQueue < -1 || c.WorkersPerQueue > 64 {
		add("workers_per_queue", "workers_per_queue %d: want -1 (the pipeline's), 0 (inline) .. 64", c.WorkersPerQueue)
	}
	for _, cpu := range c.CPUs {
		if cpu < 0 {
			add("cpus", "cpus: %d is not a CPU number", cpu)
		}
	}
	if c.BusyPoll.Usec < 0 || c.BusyPoll.Budget < 0 {
		add("busy_poll", "busy_poll: usec and budget must not be negative")
	}
	switch c.OnLinkLoss {
	case "exit", "continue":
	default:
		add("on_link_loss", "on_link_loss %s: want exit or continue", pipelinesQuote(c.OnLinkLoss))
	}
	if c.StatsInterval < 0 {
		add("stats_interval", "stats_interval: must not be negative")
	}
	switch c.Log.Format {
	case "text", "json":
	default:
		add("log.format", "log.format %s: want text or json", pipelinesQuote(c.Log.Format))
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		add("log.level", "log.level %s: want debug, info, warn or error", pipelinesQuote(c.Log.Level))
	}
	if c.Control.Socket != "" && !filepath.IsAbs(c.Control.Socket) {
		add("control.socket", "control.socket %s: want an absolute path", pipelinesQuote(c.Control.Socket))
	}
	for _, f := range []struct{ key, v string }{{"control.token_file", c.Control.TokenFile}, {"capture_dir", c.CaptureDir}} {
		if f.v != "" && (!filepath.IsAbs(f.v) || filepath.Clean(f.v) != f.v) {
			add(f.key, "%s %s: want a clean absolute path", f.key, pipelinesQuote(f.v))
		}
	}
	if c.CaptureDir == "" {
		add("capture_dir", "capture_dir: must not be empty (default %s)", DefaultCaptureDir)
	}
	if c.SampleMaxBytes < minSampleMaxBytes || c.SampleMaxBytes > maxSampleMaxBytes {
		add("sample_max_bytes", "sample_max_bytes %d: want %d (64 KiB) to %d (1 TiB)", c.SampleMaxBytes, int64(minSampleMaxBytes), int64(maxSampleMaxBytes))
	}
	if len(p) > 0 {
		sort.SliceStable(p, func(i, j int) bool { return problemLine(p[i]) < problemLine(p[j]) })
		return &ConfigError{Problems: p}
	}
	return nil
}

var problemLineRE = regexp.MustCompile(`^[^:]*:(\d+):`)

// problemLine is the line a problem names, 0 when it names none.
func problemLine(p string) int {
	if m := problemLineRE.FindStringSubmatch(p); m != nil {
		n, _ := strconv.Atoi(m[1])
		return n
	}
	return 0
}
