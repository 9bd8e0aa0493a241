package image

import (
	"encoding/json"
	"fmt"
	"slices"
)

// DefaultSeccomp is where Debian's containers-common keeps the seccomp
// profile podman applies by default.
const DefaultSeccomp = "/usr/share/containers/seccomp.json"

// SeccompWithBPF returns the seccomp profile base (an OCI/podman profile,
// JSON) changed so that a container holding CAP_BPF may call bpf(2).
//
// The runtimes' default profiles (podman's containers-common, Docker's)
// allow bpf(2) only to a container with CAP_SYS_ADMIN and answer EPERM to
// every other, so warpflowd cannot load its XDP program under them with
// the capabilities it really needs, and fails with "operation not
// permitted" although it holds CAP_BPF. Rather than run unconfined, keep
// the profile and change bpf alone: bpf leaves the rules it shared with
// other calls (those keep their conditions), and gets three of its own:
// allowed with CAP_BPF; allowed with CAP_SYS_ADMIN (as before); EPERM
// with neither. Every other field and rule is kept as it was.
func SeccompWithBPF(base []byte) ([]byte, error) {
	var prof map[string]any
	if err := json.Unmarshal(base, &prof); err != nil {
		return nil, fmt.Errorf("seccomp profile: %w", err)
	}
	calls, ok := prof["syscalls"].([]any)
	if !ok {
		return nil, fmt.Errorf("seccomp profile: no syscalls list")
	}
	var out []any
	for _, c := range calls {
		rule, ok := c.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("seccomp profile: a syscalls entry is not an object")
		}
		names, _ := rule["names"].([]any)
		i := slices.Index(names, any("bpf"))
		if i < 0 {
			out = append(out, rule)
			continue
		}
		names = slices.Delete(slices.Clone(names), i, i+1)
		if len(names) == 0 {
			continue
		}
		rule["names"] = names
		out = append(out, rule)
	}
	caps := func(cs ...string) map[string]any {
		l := make([]any, len(cs))
		for i, c := range cs {
			l[i] = c
		}
		return map[string]any{"caps": l}
	}
	out = append(out,
		map[string]any{"names": []any{"bpf"}, "action": "SCMP_ACT_ALLOW", "includes": caps("CAP_BPF"),
			"comment": "warpflow: bpf(2) with CAP_BPF (Linux >= 5.8), not only with CAP_SYS_ADMIN"},
		map[string]any{"names": []any{"bpf"}, "action": "SCMP_ACT_ALLOW", "includes": caps("CAP_SYS_ADMIN"), "excludes": caps("CAP_BPF")},
		map[string]any{"names": []any{"bpf"}, "action": "SCMP_ACT_ERRNO", "errnoRet": 1, "excludes": caps("CAP_SYS_ADMIN", "CAP_BPF")},
	)
	prof["syscalls"] = out
	return json.MarshalIndent(prof, "", "  ")
}
