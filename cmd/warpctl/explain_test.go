package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestValidateExplain: --explain shows the split, in text and in JSON,
// naming the rule that stops the kernel's prefix and why.
func TestValidateExplain(t *testing.T) {
	const split = "../../testdata/pipelines/valid/split.yaml"
	out, e, code := run(t, "validate", "--explain", split)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, e)
	}
	for _, want := range []string{
		`filter "classify": rule 0 of 4 runs in the kernel`,
		"kernel  rule[0] (line 14): drop:malformed",
		"matches no frame the kernel decides",
		`stops the prefix: its action transmits on port "web0"`,
		"workers rule[3] (line 17): kernel",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	out, _, code = run(t, "validate", "--json", "--explain", split)
	var res validateJSON
	if err := json.Unmarshal([]byte(out), &res); err != nil || code != 0 || len(res.Pipelines) != 1 {
		t.Fatalf("json: %v, exit %d:\n%s", err, code, out)
	}
	if !strings.Contains(res.Pipelines[0].Explain, "stops the prefix") {
		t.Errorf("json explain: %q", res.Pipelines[0].Explain)
	}
	// Without --explain, no split is shown.
	if out, _, _ := run(t, "validate", split); strings.Contains(out, "kernel") {
		t.Errorf("plain validate shows the split:\n%s", out)
	}
}

// TestValidateExplainBalance: --explain says that the split ends before a
// balance stage and why (the kernel cannot redirect a frame to another
// queue's socket), in text and JSON.
func TestValidateExplainBalance(t *testing.T) {
	const p = "../../testdata/live/lab-split-balance.yaml"
	out, e, code := run(t, "validate", "--explain", p)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, e)
	}
	for _, want := range []string{
		`filter "acl": all 2 rules run in the kernel`,
		`the split ends there: the filter's default leads to balance stage "lb": a balance stage's choice cannot run in the kernel`,
		"AF_XDP socket bound to the queue the frame arrived on (xsk_rcv_check)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	out, _, code = run(t, "validate", "--json", "--explain", p)
	var res validateJSON
	if err := json.Unmarshal([]byte(out), &res); err != nil || code != 0 || len(res.Pipelines) != 1 || !strings.Contains(res.Pipelines[0].Explain, `balance stage "lb"`) {
		t.Fatalf("json: %v, exit %d:\n%s", err, code, out)
	}
}
