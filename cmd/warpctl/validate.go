package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/warpflow/warpflow/pipelines"
)

// validateJSON is what validate --json prints: always this object.
type validateJSON struct {
	Pipelines []pipelineJSON `json:"pipelines"`
}

type pipelineJSON struct {
	File  string `json:"file"`
	Valid bool   `json:"valid"`
	Name  string `json:"name,omitempty"`
	// Stages counts the config's stages; DropReasons lists the drop
	// terminals the graph adds (one per reason, including the engine's).
	Stages      int               `json:"stages,omitempty"`
	Ports       []string          `json:"ports,omitempty"`
	DropReasons []string          `json:"drop_reasons,omitempty"`
	Errors      []configErrorJSON `json:"errors,omitempty"`
	// ErrorsOmitted counts problems found past the ones listed (a
	// config's error list is bounded: see pipelines.ErrorList).
	ErrorsOmitted int    `json:"errors_omitted,omitempty"`
	Explain       string `json:"explain,omitempty"` // --explain: the offload split as text
}

type configErrorJSON struct {
	Line    int    `json:"line,omitempty"`
	Column  int    `json:"column,omitempty"`
	Stage   string `json:"stage,omitempty"`
	Message string `json:"message"`
}

// configStages counts the stages written in the config: the graph's nodes
// less the implicit drop terminals ("drop:<reason>", a name no config stage
// can have).
func configStages(g *pipelines.Graph) int {
	n := 0
	for _, s := range g.Stages() {
		if !strings.HasPrefix(s.Name, "drop:") {
			n++
		}
	}
	return n
}

func newValidateCommand() *cobra.Command {
	var asJSON, explain bool
	cmd := &cobra.Command{
		Use:   "validate [--json] [--explain] PIPELINE.yaml...",
		Short: "Check pipeline configs and report every problem with file:line:column",
		Long: `Validate loads and compiles each pipeline config without running it, and
reports every problem at once, each with file:line:column and the stage it
belongs to.

` + exitCodesHelp,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return failf(codeUsage, "validate: name at least one pipeline config")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			var res validateJSON
			bad := 0
			for _, path := range args {
				pj := pipelineJSON{File: path}
				g, err := pipelines.LoadFile(path)
				if err != nil {
					bad++
					var el *pipelines.ErrorList
					if errors.As(err, &el) {
						for _, e := range el.Errs {
							pj.Errors = append(pj.Errors, configErrorJSON{Line: e.Pos.Line, Column: e.Pos.Col, Stage: e.Stage, Message: e.Msg})
						}
						pj.ErrorsOmitted = el.Omitted
					} else {
						pj.Errors = append(pj.Errors, configErrorJSON{Message: err.Error()})
					}
					if !asJSON {
						fmt.Fprintln(cmd.ErrOrStderr(), err)
					}
					res.Pipelines = append(res.Pipelines, pj)
					continue
				}
				pj.Valid, pj.Name, pj.Stages, pj.Ports, pj.DropReasons = true, g.Name(), configStages(g), g.Ports(), g.Reasons()
				if explain {
					if pj.Explain, err = explainOffload(path); err != nil {
						return failf(codeFailed, "%s: explain: %v", path, err)
					}
				}
				res.Pipelines = append(res.Pipelines, pj)
				if !asJSON {
					fmt.Fprintf(cmd.OutOrStdout(), "%s: pipeline %q OK: %d stages, ports %v, drop reasons %v\n%s",
						path, g.Name(), pj.Stages, g.Ports(), g.Reasons(), pj.Explain)
				}
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				if err := enc.Encode(res); err != nil {
					return failf(codeFailed, "encode results: %v", err)
				}
			}
			if bad > 0 {
				return failf(codeFailed, "%d of %d pipelines invalid", bad, len(args))
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the results as JSON (see README: JSON output)")
	cmd.Flags().BoolVar(&explain, "explain", false, "also show the split a live AF_XDP port makes (offload: auto): the filter rules the XDP program runs, and the rule that stops the prefix and why")
	return cmd
}
