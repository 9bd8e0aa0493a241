package pipelines

import (
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

// reservedNames may not name stages: they are words edges use ("accept" in
// filter actions, "drop"/"pass" as verdicts), and a stage so named would make
// such configs ambiguous.
var reservedNames = []string{"accept", "drop", "pass"}

func isReserved(s string) bool { return contains(reservedNames, s) }

// nameRule says what a name may be made of (see validName).
const nameRule = "letters, digits, '_', '-' or '.', at most 64 characters"

// validateSpec checks everything about a Spec that does not need the stage
// types' Build: pipeline name, settings, stage names and types. It fills
// c.index (stage name to stage number, first definition wins).
func (c *compiler) validateSpec() {
	s := c.spec
	switch {
	case s.nameBad:
	case s.Name == "":
		c.errs.Add(s.namePos, "", "missing pipeline name")
	case !validName(s.Name):
		c.errs.Add(s.namePos, "", "invalid pipeline name "+clip(s.Name)+": want "+nameRule)
	}
	if b := s.Settings.BatchSize; b < MinBatchSize || b > MaxBatchSize {
		c.errs.Add(s.batchPos, "", sprintf("settings.batch_size %d out of range [%d, %d]", b, MinBatchSize, MaxBatchSize))
	}
	if w := s.Settings.Workers; w < MinWorkers || w > MaxWorkers {
		c.errs.Add(s.workersPos, "", sprintf("settings.workers %d out of range [%d, %d]", w, MinWorkers, MaxWorkers))
	}
	if len(s.Stages) == 0 && !s.stagesBad {
		c.errs.Add(s.stagesPos, "", "stages: want at least one stage")
	}

	c.index = make(map[string]int, len(s.Stages))
	for i := range s.Stages {
		st := &s.Stages[i]
		short := c.shorthand(i, st)
		switch {
		case st.nameBad:
		case st.Name == "" && short:
		case st.Name == "":
			c.errs.Add(st.Pos, "", "stage has no name")
		case !validName(st.Name):
			c.errs.Add(st.NamePos, "", "invalid stage name "+clip(st.Name)+": want "+nameRule)
		case isReserved(st.Name):
			c.errs.Add(st.NamePos, st.Name, "stage name is reserved ("+strings.Join(reservedNames, ", ")+")")
		default:
			if first, dup := c.index[st.Name]; dup {
				c.errs.Add(st.NamePos, st.Name, sprintf("duplicate stage name (first defined at line %d)", s.Stages[first].NamePos.Line))
			} else {
				c.index[st.Name] = i
			}
		}
		switch {
		case st.typeBad, short:
		case st.Type == "":
			c.errs.Add(st.Pos, st.Name, "missing type")
		default:
			if _, ok := c.kinds[st.Type]; !ok {
				c.errs.Add(st.TypePos, st.Name, "unknown stage type "+clip(st.Type)+" (known: "+strings.Join(c.kindNames(), ", ")+")")
			}
		}
	}
}

// shorthand reports a typeless stage written in the shorthand people reach
// for first, a stage type as the key (`- parse: {}`, `- filter: {rules:
// [...]}`), naming the key and the form a stage takes, instead of "has no
// name" and "missing type". There is one way to write a stage: its name
// is what counters, swaps and edges know it by, so it is never guessed.
// It returns whether it reported.
func (c *compiler) shorthand(i int, st *StageSpec) bool {
	if st.Type != "" || st.typeBad || st.Node == nil {
		return false
	}
	for j := 0; j+1 < len(st.Node.Content); j += 2 {
		k, v := st.Node.Content[j], st.Node.Content[j+1]
		if _, ok := c.kinds[k.Value]; !ok {
			continue
		}
		name := "NAME"
		if st.Name != "" && !st.nameBad {
			name = st.Name
		}
		form := "{name: " + name + ", type: " + k.Value
		if v.Kind == yaml.MappingNode {
			for o := 0; o+1 < len(v.Content) && o < 6; o += 2 {
				if opt := v.Content[o].Value; validName(opt) {
					form += ", " + opt + ": ..."
				}
			}
		}
		form += ", ...}"
		where := sprintf("stage %d: ", i+1)
		if st.Name != "" {
			where = ""
		}
		c.errs.Add(Pos{File: c.spec.File, Line: k.Line, Col: k.Column}, st.Name, where+clip(k.Value)+" is not a stage field; a stage is "+form)
		return true
	}
	return false
}

func (c *compiler) kindNames() []string {
	names := make([]string, 0, len(c.kinds))
	for n := range c.kinds {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// checkTarget reports an edge target that names no stage. It returns the
// stage number, or -1.
func (c *compiler) checkTarget(stage string, t Target) int {
	if isReserved(t.Stage) {
		c.errs.Add(t.Pos, stage, "edge to reserved word "+clip(t.Stage)+": want a stage name or drop:<reason>")
		return -1
	}
	i, ok := c.index[t.Stage]
	if !ok {
		c.errs.Add(t.Pos, stage, "edge to undefined stage "+clip(t.Stage))
		return -1
	}
	return i
}

// checkCycles reports every cycle among stages (strongly connected
// components with more than one stage, or a stage with an edge to itself),
// naming the stages on one concrete loop through it.
func (c *compiler) checkCycles(adj [][]int) bool {
	found := false
	for _, comp := range sccs(adj) {
		if len(comp) == 1 && !contains1(adj[comp[0]], comp[0]) {
			continue
		}
		found = true
		start := comp[0] // lowest stage number: deterministic
		loop := loopThrough(adj, start, comp)
		names := make([]string, len(loop))
		for i, n := range loop {
			names[i] = c.spec.Stages[n].Name
		}
		st := &c.spec.Stages[start]
		c.errs.Add(st.Pos, st.Name, "stages form a cycle: "+strings.Join(names, " -> ")+" -> "+names[0])
	}
	return found
}

// checkReachable reports stages that no path from the entry (the first
// stage) reaches.
func (c *compiler) checkReachable(adj [][]int) {
	if len(adj) == 0 {
		return
	}
	seen := make([]bool, len(adj))
	stack := []int{0}
	seen[0] = true
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, m := range adj[n] {
			if !seen[m] {
				seen[m] = true
				stack = append(stack, m)
			}
		}
	}
	entry := c.spec.Stages[0].Name
	for i, ok := range seen {
		if !ok {
			st := &c.spec.Stages[i]
			c.errs.Add(st.Pos, st.Name, "stage is unreachable from the entry stage "+quote(entry))
		}
	}
}

// sccs returns the strongly connected components of adj (Tarjan), each
// sorted, in order of their lowest member.
func sccs(adj [][]int) [][]int {
	n := len(adj)
	index, low := make([]int, n), make([]int, n)
	onStack := make([]bool, n)
	for i := range index {
		index[i] = -1
	}
	var stack []int
	var out [][]int
	next := 0
	// Iterative Tarjan: configs are small, but a fuzzer is not, and the
	// recursion depth of a long chain would be the stage count.
	type frame struct{ v, edge int }
	for root := 0; root < n; root++ {
		if index[root] >= 0 {
			continue
		}
		call := []frame{{root, 0}}
		index[root], low[root] = next, next
		next++
		stack = append(stack, root)
		onStack[root] = true
		for len(call) > 0 {
			f := &call[len(call)-1]
			if f.edge < len(adj[f.v]) {
				w := adj[f.v][f.edge]
				f.edge++
				if index[w] < 0 {
					index[w], low[w] = next, next
					next++
					stack = append(stack, w)
					onStack[w] = true
					call = append(call, frame{w, 0})
				} else if onStack[w] && index[w] < low[f.v] {
					low[f.v] = index[w]
				}
				continue
			}
			v := f.v
			call = call[:len(call)-1]
			if len(call) > 0 {
				if p := call[len(call)-1].v; low[v] < low[p] {
					low[p] = low[v]
				}
			}
			if low[v] == index[v] {
				var comp []int
				for {
					w := stack[len(stack)-1]
					stack = stack[:len(stack)-1]
					onStack[w] = false
					comp = append(comp, w)
					if w == v {
						break
					}
				}
				sort.Ints(comp)
				out = append(out, comp)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i][0] < out[j][0] })
	return out
}

// loopThrough returns a shortest loop start -> ... -> start inside comp
// (without repeating start at the end).
func loopThrough(adj [][]int, start int, comp []int) []int {
	in := make(map[int]bool, len(comp))
	for _, n := range comp {
		in[n] = true
	}
	prev := map[int]int{}
	queue := []int{start}
	for len(queue) > 0 {
		n := queue[0]
		queue = queue[1:]
		for _, m := range adj[n] {
			if m == start {
				var loop []int
				for x := n; x != start; x = prev[x] {
					loop = append(loop, x)
				}
				loop = append(loop, start)
				for i, j := 0, len(loop)-1; i < j; i, j = i+1, j-1 {
					loop[i], loop[j] = loop[j], loop[i]
				}
				return loop
			}
			if _, seen := prev[m]; !seen && in[m] {
				prev[m] = n
				queue = append(queue, m)
			}
		}
	}
	return []int{start} // unreachable for a real component
}

func contains1(list []int, x int) bool {
	for _, y := range list {
		if y == x {
			return true
		}
	}
	return false
}
