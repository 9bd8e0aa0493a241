package pipelines

import (
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"
)

// ConfigError is one problem found in a pipeline config.
type ConfigError struct {
	Pos   Pos
	Stage string // the stage the problem belongs to; empty for pipeline-level problems
	Msg   string
}

func (e ConfigError) Error() string {
	if e.Stage == "" {
		return fmt.Sprintf("%s: %s", e.Pos, e.Msg)
	}
	return fmt.Sprintf("%s: stage %q: %s", e.Pos, e.Stage, e.Msg)
}

// ErrorList is every problem found in a config, reported together. It is an
// error when non-empty; its Error lists one problem per line in file order.
//
// A hostile config can have millions of problems, and a config's errors
// go back to a client and into the daemon's log, so the list is bounded:
// it keeps the first MaxKeptProblems found (Omitted counts the rest),
// Error lists the first MaxListedProblems of those in file order and says
// how many more there were, and each message is at most MaxProblemBytes.
type ErrorList struct {
	Errs    []ConfigError
	Omitted int // problems found past MaxKeptProblems, not kept
}

// The bounds of an ErrorList.
const (
	MaxKeptProblems   = 1000
	MaxListedProblems = 100
	MaxProblemBytes   = 400
)

// Add records a problem.
func (l *ErrorList) Add(pos Pos, stage, msg string) {
	if len(l.Errs) >= MaxKeptProblems {
		l.Omitted++
		return
	}
	if len(msg) > MaxProblemBytes {
		cut := MaxProblemBytes
		for cut > 0 && !utf8.RuneStart(msg[cut]) {
			cut--
		}
		msg = msg[:cut] + "... (message cut)"
	}
	if len(stage) > 64 {
		stage = stage[:64] + "..." // stage names are at most 64 bytes; an invalid one is quoted in msg
	}
	l.Errs = append(l.Errs, ConfigError{Pos: pos, Stage: stage, Msg: msg})
}

// merge adds o's problems to l, within l's bounds.
func (l *ErrorList) merge(o *ErrorList) {
	for _, e := range o.Errs {
		l.Add(e.Pos, e.Stage, e.Msg)
	}
	l.Omitted += o.Omitted
}

// Len returns the number of problems recorded, kept or not.
func (l *ErrorList) Len() int {
	if l == nil {
		return 0
	}
	return len(l.Errs) + l.Omitted
}

// Sort orders problems by position, then message, so reports are stable.
func (l *ErrorList) Sort() {
	sort.SliceStable(l.Errs, func(i, j int) bool {
		a, b := l.Errs[i], l.Errs[j]
		if a.Pos.Line != b.Pos.Line {
			return a.Pos.Line < b.Pos.Line
		}
		if a.Pos.Col != b.Pos.Col {
			return a.Pos.Col < b.Pos.Col
		}
		return a.Msg < b.Msg
	})
}

func (l *ErrorList) Error() string {
	var sb strings.Builder
	for i, e := range l.Errs {
		if i == MaxListedProblems {
			break
		}
		if i > 0 {
			sb.WriteByte('\n')
		}
		sb.WriteString(e.Error())
	}
	if more := l.Len() - min(len(l.Errs), MaxListedProblems); more > 0 {
		fmt.Fprintf(&sb, "\n... and %d more problems (the first %d are listed)", more, MaxListedProblems)
	}
	return sb.String()
}

// Err returns l as an error, or nil when it holds no problems.
func (l *ErrorList) Err() error {
	if l.Len() == 0 {
		return nil
	}
	l.Sort()
	return l
}
