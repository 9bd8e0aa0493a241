package pipelines

import (
	"github.com/warpflow/warpflow/rings"
	"go.yaml.in/yaml/v3"
)

// The terminal stage types. They have no Build and no instances: the graph
// itself writes their verdict into each packet's Meta.
var (
	// txKind transmits on the output port named by its `port` option.
	txKind = Kind{Name: "tx", Terminal: true}
	// dropKind drops with the reason named by its `reason` option.
	dropKind = Kind{Name: "drop", Terminal: true}
	// passKind hands packets back to the kernel (the port's pass path).
	passKind = Kind{Name: "pass", Terminal: true}
)

// DefaultDropReason is the reason of a drop stage without a `reason` option.
const DefaultDropReason = "dropped"

// BadEdgeReason is the drop reason of packets a stage sent down an edge it
// does not have (a bug in the stage): the graph routes them to a drop
// terminal of this reason instead of indexing out of range.
const BadEdgeReason = "internal_bad_edge"

// terminal is what a terminal stage does to the packets that reach it.
type terminal struct {
	verdict rings.Verdict
	label   string // tx: port name; drop: reason
	pos     Pos    // where the label was written, for first-appearance order
}

// buildTerminal decodes a terminal stage's options, reporting unknown
// options and a bad or missing label together.
func buildTerminal(c *BuildContext, k Kind) (terminal, bool) {
	switch k.Name {
	case txKind.Name:
		ok := c.Decode(&struct {
			Port yaml.Node `yaml:"port"`
		}{})
		n := c.Option("port")
		if n == nil {
			c.Errorf(nil, "tx stage needs a port option")
			return terminal{}, false
		}
		port, lok := terminalLabel(c, n, "port")
		return terminal{verdict: rings.VerdictTX, label: port, pos: c.Pos(n)}, ok && lok
	case dropKind.Name:
		ok := c.Decode(&struct {
			Reason yaml.Node `yaml:"reason"`
		}{})
		n := c.Option("reason")
		if n == nil {
			return terminal{verdict: rings.VerdictDrop, label: DefaultDropReason, pos: c.Pos(nil)}, ok
		}
		reason, lok := terminalLabel(c, n, "reason")
		return terminal{verdict: rings.VerdictDrop, label: reason, pos: c.Pos(n)}, ok && lok
	case passKind.Name:
		ok := c.Decode(&struct{}{})
		return terminal{verdict: rings.VerdictPass, pos: c.Pos(nil)}, ok
	}
	c.Errorf(nil, "terminal stage type %q is not supported", k.Name)
	return terminal{}, false
}

func terminalLabel(c *BuildContext, n *yaml.Node, key string) (string, bool) {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" || !validName(n.Value) {
		c.Errorf(n, "%s: want a name of %s, got %s", key, nameRule, describe(n))
		return "", false
	}
	return n.Value, true
}
