package pipelines

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"

	goccyyaml "github.com/goccy/go-yaml"
	goccyparser "github.com/goccy/go-yaml/parser"
	"github.com/warpflow/warpflow/internal/yamlbound"
	"github.com/warpflow/warpflow/rings"
	"go.yaml.in/yaml/v3"
)

// Spec is a pipeline config as written: plain data with the YAML nodes kept
// for positions. Parse makes one; Compile validates it and builds a Graph.
type Spec struct {
	File     string // config file name, used in positions
	Name     string
	Settings Settings
	Stages   []StageSpec
	Root     *yaml.Node // the document's top-level mapping (nil for a Spec built in code)

	namePos     Pos
	batchPos    Pos
	workersPos  Pos
	stagesPos   Pos
	nameBad     bool       // name present but not a string: already reported
	stagesBad   bool       // stages present but not a list: already reported
	parseErrors *ErrorList // problems Parse found, reported again by Compile
}

// Settings are the pipeline's engine settings.
type Settings struct {
	BatchSize int // packets per batch, 1..1024
	Workers   int // worker goroutines, 0..64; 0 runs the graph inline in the I/O loop
	// Backend runs the pipeline: "cpu" (the default; "" means it) or
	// "cuda" (the gpu package's executor: the filter's classifier in a
	// persistent CUDA kernel). A daemon or `warpctl replay --backend`
	// may override it.
	Backend string
}

// Backends are the values settings.backend may take.
var Backends = []string{"cpu", "cuda"}

// DefaultSettings returns the settings a config gets when it names none.
func DefaultSettings() Settings { return Settings{BatchSize: 64, Workers: 1} }

// Setting limits, enforced by Compile.
const (
	MinBatchSize = 1
	MaxBatchSize = rings.MaxBatch
	MinWorkers   = 0
	MaxWorkers   = 64
)

// Limits on a config's YAML, checked over the raw bytes before anything
// decodes them (internal/yamlbound): a config over one is refused with an
// error naming the limit. They are far above any real config: a 100,000-rule
// filter is about 7 MB and 1.1 million nodes, at depth 6.
const (
	MaxConfigBytes = 64 << 20  // bytes in one config
	MaxConfigDepth = 64        // nested mappings and sequences
	MaxConfigNodes = 4_000_000 // YAML nodes: every scalar (empty values too), mapping and sequence
)

// ConfigLimits are the limits above, as the bounded reader takes them.
func ConfigLimits() yamlbound.Limits {
	return yamlbound.Limits{MaxBytes: MaxConfigBytes, MaxDepth: MaxConfigDepth, MaxNodes: MaxConfigNodes}
}

// StageSpec is one entry of a config's stages list.
type StageSpec struct {
	Name string
	Type string
	Next string // the explicit `next:` target as written; "" when absent

	Pos     Pos // the stage's mapping
	NamePos Pos
	TypePos Pos
	NextPos Pos
	// Node is the stage's whole mapping (name, type, next and the options the
	// stage type decodes). Nil for a StageSpec built in code: Compile then
	// synthesises one from Name, Type and Next.
	Node *yaml.Node

	nameBad, typeBad, nextBad bool // present but not a string: already reported
	// noBuild: a duplicate key or an alias in the stage (reported): its
	// options are not decoded, so one problem is not reported twice and no
	// alias is expanded.
	noBuild bool
}

// Parse reads a YAML pipeline config. It checks the YAML syntax and the
// shape of the document (known keys, value types) and returns every problem
// it finds as an *ErrorList; semantic checks are Compile's. When the document
// could be read at all, the returned Spec is non-nil even on error: it holds
// what was understood, and Compile on it reports Parse's problems together
// with its own (which is what Load does).
func Parse(file string, data []byte) (*Spec, error) {
	errs := &ErrorList{}
	root, err := parseYAML(file, data)
	if err != nil {
		return nil, err
	}
	s := &Spec{File: file, Settings: DefaultSettings(), parseErrors: errs}
	p := &parser{file: file, errs: errs}
	p.rejectAliases(root)
	s.namePos, s.stagesPos = p.pos(root), p.pos(root)
	if root.Kind != yaml.MappingNode {
		if root.Kind != yaml.AliasNode {
			p.errorf(root, "", "config must be a mapping with name, settings and stages, got %s", describe(root))
		}
		s.nameBad, s.stagesBad = true, true // said above: no more about them
		return s, errs.Err()
	}
	s.Root = root
	p.checkDuplicates(root, "")
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		switch k.Value {
		case "name":
			s.namePos = p.pos(v)
			s.Name, s.nameBad = p.str(v, "name", "")
		case "settings":
			p.settings(s, v)
		case "stages":
			s.stagesPos = p.pos(v)
			if v.Kind != yaml.SequenceNode {
				if v.Kind != yaml.AliasNode {
					p.errorf(v, "", "stages: want a list of stages, got %s", describe(v))
				}
				s.stagesBad = true
				continue
			}
			for _, item := range v.Content {
				if st, ok := p.stage(item); ok {
					s.Stages = append(s.Stages, st)
				}
			}
		default:
			p.errorf(k, "", "unknown key %s (known: name, settings, stages)", clip(k.Value))
		}
	}
	return s, errs.Err()
}

// parseYAML decodes exactly one YAML document into a node tree, turning
// syntax errors into a positioned *ErrorList. The input is bounded first
// (size, anchors and aliases, depth, node count: see ConfigLimits), so
// nothing is decoded, let alone expanded, that is over a limit; a second
// document is refused from the bounded scan, without decoding it.
func parseYAML(file string, data []byte) (*yaml.Node, error) {
	st, err := yamlbound.Check(data, ConfigLimits())
	if err != nil {
		return nil, boundError(file, err)
	}
	if st.Documents > 1 {
		el := &ErrorList{}
		el.Add(Pos{File: file, Line: st.SecondDocLine, Col: st.SecondDocCol}, "", "config must be a single YAML document")
		return nil, el.Err()
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		el := &ErrorList{}
		if errors.Is(err, io.EOF) {
			el.Add(Pos{File: file, Line: 1, Col: 1}, "", "empty config: want a mapping with name, settings and stages")
		} else {
			el.Add(syntaxErrorPos(file, err, data, st))
		}
		return nil, el.Err()
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		el := &ErrorList{}
		if err != nil {
			el.Add(syntaxErrorPos(file, err, data, st))
		} else {
			el.Add(Pos{File: file, Line: extra.Line, Col: extra.Column}, "", "config must be a single YAML document")
		}
		return nil, el.Err()
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		el := &ErrorList{}
		el.Add(Pos{File: file, Line: 1, Col: 1}, "", "empty config: want a mapping with name, settings and stages")
		return nil, el.Err()
	}
	return doc.Content[0], nil
}

// boundError turns a refusal of the bounded reader into a positioned
// *ErrorList.
func boundError(file string, err error) error {
	var be *yamlbound.Error
	if !errors.As(err, &be) {
		return err
	}
	pos := Pos{File: file, Line: max(be.Line, 1), Col: max(be.Col, 1)}
	el := &ErrorList{}
	if be.Limit == yamlbound.LimitAnchor {
		el.Add(pos, "", be.Msg+" in pipeline configs")
	} else {
		el.Add(pos, "", "config refused: "+be.Msg)
	}
	return el.Err()
}

// syntaxErrorPos positions a YAML syntax error. yaml.v3's syntax errors
// carry a line but no column, and for parser errors the line is where the
// enclosing block began, not where it went wrong; so the same bytes go
// through goccy/go-yaml's parser, which names the token it failed at, with
// its line and column, and that position and message are reported. Where
// goccy reads what yaml.v3 refused (the two differ on some corner cases),
// yaml.v3's line is kept, at column 1. The config itself is still decoded
// by yaml.v3 alone: every stage's Build is written against its Node tree.
//
// goccy builds a whole syntax tree, some 400 bytes per input byte, so it
// reads at most maxGoccyBytes: the whole config when it is that small,
// else the config up to the end of the line where the bounded reader
// noticed a syntax error (one yaml.v3 reports too; it may have met another
// before it). Past that, the error is yaml.v3's message at the bounded
// reader's line and column, or at yaml.v3's line when the bounded reader
// noticed none.
func syntaxErrorPos(file string, err error, data []byte, st yamlbound.Stats) (Pos, string, string) {
	prefix := data
	if len(data) > maxGoccyBytes && st.ErrorEnd > 0 && st.ErrorEnd <= len(data) {
		end := len(data)
		if i := bytes.IndexByte(data[st.ErrorEnd:], '\n'); i >= 0 {
			end = st.ErrorEnd + i + 1
		}
		prefix = data[:end]
	}
	if len(prefix) <= maxGoccyBytes {
		if line, col, msg, ok := goccySyntaxError(prefix); ok {
			return Pos{File: file, Line: line, Col: col}, "", "yaml: " + msg
		}
	}
	line, msg := yamlErrorLine(err, data)
	if len(data) > maxGoccyBytes && st.ErrorLine > 0 {
		return Pos{File: file, Line: st.ErrorLine, Col: st.ErrorCol}, "", "yaml: " + msg
	}
	return Pos{File: file, Line: line, Col: 1}, "", "yaml: " + msg
}

// maxGoccyBytes is the most syntaxErrorPos hands to goccy/go-yaml.
const maxGoccyBytes = 32 << 10

// goccySyntaxError returns where goccy/go-yaml's parser fails on data, if it
// does. A panic in it (a parser bug on hostile input) counts as no answer.
func goccySyntaxError(data []byte) (line, col int, msg string, ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	_, err := goccyparser.ParseBytes(data, 0)
	var ye goccyyaml.Error
	if err == nil || !errors.As(err, &ye) {
		return 0, 0, "", false
	}
	tk := ye.GetToken()
	if tk == nil || tk.Position == nil || tk.Position.Line < 1 || tk.Position.Column < 1 {
		return 0, 0, "", false
	}
	return tk.Position.Line, tk.Position.Column, strings.ReplaceAll(ye.GetMessage(), "\t", `\t`), true
}

var yamlLineRE = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// yamlParserErrors are the messages of libyaml's parser (as opposed to its
// scanner). yaml.v3 prints the line of these 0-based, so they need one
// added; it prints scanner errors' lines 1-based.
var yamlParserErrors = []string{
	"did not find expected ',' or ']'",
	"did not find expected ',' or '}'",
	"did not find expected '-' indicator",
	"did not find expected <document start>",
	"did not find expected key",
	"did not find expected node content",
	"found duplicate %TAG directive",
	"found duplicate %YAML directive",
	"found incompatible YAML document",
	"found undefined tag handle",
}

// yamlErrorLine splits yaml.v3's "yaml: line N: msg" (its syntax errors carry
// a line but no column) into a 1-based line within data and the message.
func yamlErrorLine(err error, data []byte) (int, string) {
	s := err.Error()
	if m := yamlLineRE.FindStringSubmatch(s); m != nil {
		n, convErr := strconv.Atoi(m[1])
		if convErr == nil {
			if contains(yamlParserErrors, m[2]) {
				n++
			}
			lines := bytes.Count(data, []byte("\n"))
			if len(data) > 0 && data[len(data)-1] != '\n' {
				lines++
			}
			return max(1, min(n, lines)), m[2]
		}
	}
	if len(s) > 6 && s[:6] == "yaml: " {
		s = s[6:]
	}
	return 1, cleanYAMLError(errors.New(s))
}

type parser struct {
	file string
	errs *ErrorList
}

func (p *parser) pos(n *yaml.Node) Pos { return Pos{File: p.file, Line: n.Line, Col: n.Column} }

func (p *parser) errorf(n *yaml.Node, stage, format string, args ...any) {
	p.errs.Add(p.pos(n), stage, fmt.Sprintf(format, args...))
}

// rejectAliases reports every alias: a pipeline config has no use for them,
// and refusing them keeps the node tree a tree (no alias bombs, no cycles).
func (p *parser) rejectAliases(n *yaml.Node) {
	if n.Kind == yaml.AliasNode {
		p.errorf(n, "", "yaml aliases are not supported in pipeline configs")
		return
	}
	for _, c := range n.Content {
		p.rejectAliases(c)
	}
}

func hasAlias(n *yaml.Node) bool {
	if n.Kind == yaml.AliasNode {
		return true
	}
	for _, c := range n.Content {
		if hasAlias(c) {
			return true
		}
	}
	return false
}

// checkDuplicates reports keys that appear twice in mapping n. Past a
// few keys it looks them up in a map: a hostile mapping of a million keys
// costs a million lookups, not half a trillion comparisons.
func (p *parser) checkDuplicates(n *yaml.Node, stage string) bool {
	dup := false
	report := func(i, first int) {
		p.errorf(n.Content[i], stage, "duplicate key %s (first at line %d)", clip(n.Content[i].Value), n.Content[first].Line)
		dup = true
	}
	if len(n.Content) <= 32 {
		for i := 0; i+1 < len(n.Content); i += 2 {
			for j := 0; j < i; j += 2 {
				if n.Content[j].Value == n.Content[i].Value {
					report(i, j)
					break
				}
			}
		}
		return dup
	}
	seen := make(map[string]int, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		if j, ok := seen[n.Content[i].Value]; ok {
			report(i, j)
			continue
		}
		seen[n.Content[i].Value] = i
	}
	return dup
}

// str reads a string scalar. Any scalar counts (a name may look like a
// number), but null, lists and mappings are type errors. bad reports a value
// that is present but unusable (already reported).
func (p *parser) str(n *yaml.Node, key, stage string) (s string, bad bool) {
	if n.Kind == yaml.AliasNode {
		return "", true // reported by rejectAliases
	}
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		p.errorf(n, stage, "%s: want a string, got %s", key, describe(n))
		return "", true
	}
	return n.Value, false
}

func (p *parser) settings(s *Spec, n *yaml.Node) {
	if n.Kind != yaml.MappingNode {
		if n.Tag != "!!null" && n.Kind != yaml.AliasNode { // "settings:" with nothing under it means defaults
			p.errorf(n, "", "settings: want a mapping, got %s", describe(n))
		}
		return
	}
	p.checkDuplicates(n, "")
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		switch k.Value {
		case "batch_size":
			s.batchPos = p.pos(v)
			if x, ok := p.int(v, "settings.batch_size"); ok {
				s.Settings.BatchSize = x
			}
		case "workers":
			s.workersPos = p.pos(v)
			if x, ok := p.int(v, "settings.workers"); ok {
				s.Settings.Workers = x
			}
		case "backend":
			if x, bad := p.str(v, "settings.backend", ""); !bad {
				if !slices.Contains(Backends, x) {
					p.errorf(v, "", "settings.backend %s: want cpu or cuda", clip(x))
				} else {
					s.Settings.Backend = x
				}
			}
		default:
			p.errorf(k, "", "unknown setting %s (known: batch_size, workers, backend)", clip(k.Value))
		}
	}
}

func (p *parser) int(n *yaml.Node, key string) (int, bool) {
	if n.Kind == yaml.AliasNode {
		return 0, false // reported by rejectAliases
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!int" {
		x, err := strconv.ParseInt(n.Value, 0, 32)
		if err == nil {
			return int(x), true
		}
		var v int64
		if n.Decode(&v) == nil && v >= -1<<31 && v < 1<<31 {
			return int(v), true // 0o17, 1_000: forms Go's parser spells differently
		}
	}
	p.errorf(n, "", "%s: want an integer, got %s", key, describe(n))
	return 0, false
}

// stage reads one stages entry. Keys other than name, type and next are the
// stage type's options, which Compile hands to the type's Build.
func (p *parser) stage(n *yaml.Node) (StageSpec, bool) {
	if n.Kind != yaml.MappingNode {
		if n.Kind != yaml.AliasNode {
			p.errorf(n, "", "stage: want a mapping with name and type, got %s", describe(n))
		}
		return StageSpec{}, false
	}
	st := StageSpec{Pos: p.pos(n), NamePos: p.pos(n), TypePos: p.pos(n), Node: n}
	if v := mappingValue(n, "name"); v != nil && v.Kind == yaml.ScalarNode {
		st.Name = v.Value // for the messages below
	}
	st.noBuild = p.checkDuplicates(n, st.Name) || hasAlias(n)
	if v := mappingValue(n, "name"); v != nil {
		st.NamePos = p.pos(v)
		st.Name, st.nameBad = p.str(v, "name", "")
	}
	if v := mappingValue(n, "type"); v != nil {
		st.TypePos = p.pos(v)
		st.Type, st.typeBad = p.str(v, "type", st.Name)
	}
	if v := mappingValue(n, "next"); v != nil {
		st.NextPos = p.pos(v)
		st.Next, st.nextBad = p.str(v, "next", st.Name)
	}
	return st, true
}

// describe names a node's YAML type for error messages.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	case yaml.ScalarNode:
		switch n.Tag {
		case "!!null":
			return "null"
		case "!!str":
			return clip(n.Value)
		case "!!int":
			return "integer " + clipRaw(n.Value)
		case "!!bool":
			return "boolean " + n.Value
		case "!!float":
			return "number " + clipRaw(n.Value)
		}
		return n.Tag + " " + clip(n.Value)
	}
	return "nothing"
}
