package daemon

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestRepeats: a repeating line is logged at once, then at most once per
// interval with the count of the ones held back, and Flush logs what is
// still held back, so every occurrence is counted.
func TestRepeats(t *testing.T) {
	var buf bytes.Buffer
	r := newRepeats(slog.New(slog.NewJSONHandler(&buf, nil)), 10*time.Second)
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	// A 250 ms check for 25 s: 100 occurrences of one key, and one of
	// another.
	for i := range 100 {
		r.Log(t0.Add(time.Duration(i)*250*time.Millisecond), "socket a", slog.LevelWarn, "socket error", "port", "a")
	}
	r.Log(t0.Add(time.Second), "socket b", slog.LevelWarn, "socket error", "port", "b")
	r.Flush(t0.Add(30 * time.Second))

	var lines []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		lines = append(lines, m)
	}
	var total float64
	var a []map[string]any
	for _, m := range lines {
		if m["msg"] != "socket error" || m["level"] != "WARN" {
			t.Errorf("line %v", m)
		}
		if m["port"] == "a" {
			a = append(a, m)
			if m["held_back"] != true {
				total++ // the line's own occurrence
			}
			if n, ok := m["repeated"].(float64); ok {
				total += n
			}
		}
	}
	// t=0 logged; 0.25..9.75 held (39), t=10 logged with 39; 10.25..19.75
	// held, t=20 logged with 39; 20.25..24.75 held (19): Flush.
	if len(a) != 4 || a[0]["repeated"] != nil || a[1]["repeated"] != 39.0 || a[2]["repeated"] != 39.0 || a[3]["repeated"] != 19.0 || a[3]["held_back"] != true {
		t.Errorf("port a lines %v, want 4: at once, two with 39 held back, Flush's with 19", a)
	}
	if total != 100 {
		t.Errorf("port a lines account for %v occurrences, want 100", total)
	}
	if len(lines)-len(a) != 1 {
		t.Errorf("port b: %d lines, want 1 (its own key)", len(lines)-len(a))
	}
	if a[1]["since"] != t0.Add(250*time.Millisecond).Format(time.RFC3339Nano) {
		t.Errorf("since %v, want the first held one's time", a[1]["since"])
	}
}
