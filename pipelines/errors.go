package pipelines

import (
	"fmt"
	"sort"
	"strings"
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
type ErrorList struct {
	Errs []ConfigError
}

// Add records a problem.
func (l *ErrorList) Add(pos Pos, stage, msg string) {
	l.Errs = append(l.Errs, ConfigError{Pos: pos, Stage: stage, Msg: msg})
}

// Len returns the number of problems recorded.
func (l *ErrorList) Len() int {
	if l == nil {
		return 0
	}
	return len(l.Errs)
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
		if i > 0 {
			sb.WriteByte('\n')
		}
		sb.WriteString(e.Error())
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
