package image

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestUnitCapabilities(t *testing.T) {
	caps, err := UnitCapabilities("../../cmd/warpflowd/warpflowd.service")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_BPF"} {
		if !slices.Contains(caps, c) {
			t.Errorf("the unit's capabilities %v lack %s", caps, c)
		}
	}
	if got := Short([]string{"CAP_NET_ADMIN", "CAP_BPF"}); !slices.Equal(got, []string{"NET_ADMIN", "BPF"}) {
		t.Errorf("Short: %v", got)
	}
	dir := t.TempDir()
	for _, tc := range []struct {
		name, unit string
		want       []string
		err        string
	}{
		{"plain", "[Service]\nAmbientCapabilities=CAP_NET_ADMIN cap_bpf\nCapabilityBoundingSet=CAP_BPF CAP_NET_ADMIN\n", []string{"CAP_NET_ADMIN", "CAP_BPF"}, ""},
		{"lines add up", "AmbientCapabilities=CAP_NET_ADMIN\nAmbientCapabilities=CAP_BPF\n", []string{"CAP_NET_ADMIN", "CAP_BPF"}, ""},
		{"empty resets", "AmbientCapabilities=CAP_SYS_ADMIN\nAmbientCapabilities=\nAmbientCapabilities=CAP_BPF\n", []string{"CAP_BPF"}, ""},
		{"comments", "# AmbientCapabilities=CAP_SYS_ADMIN\n; AmbientCapabilities=CAP_SYS_ADMIN\nAmbientCapabilities=CAP_BPF\n", []string{"CAP_BPF"}, ""},
		{"bounding differs", "AmbientCapabilities=CAP_BPF\nCapabilityBoundingSet=CAP_BPF CAP_SYS_ADMIN\n", nil, "differ"},
		{"negated", "AmbientCapabilities=~CAP_SYS_ADMIN\n", nil, "negated"},
		{"not a capability", "AmbientCapabilities=NET_ADMIN\n", nil, "not a capability"},
		{"none", "[Service]\nUser=x\n", nil, "no AmbientCapabilities"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_")+".service")
			os.WriteFile(p, []byte(tc.unit), 0o644)
			got, err := UnitCapabilities(p)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want one saying %q", err, tc.err)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("%v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

func TestSeccompWithBPF(t *testing.T) {
	base := []byte(`{"defaultAction": "SCMP_ACT_ERRNO", "defaultErrnoRet": 38, "archMap": [{"architecture": "SCMP_ARCH_X86_64"}],
 "syscalls": [
  {"names": ["read", "write"], "action": "SCMP_ACT_ALLOW"},
  {"names": ["bpf", "setns"], "action": "SCMP_ACT_ALLOW", "includes": {"caps": ["CAP_SYS_ADMIN"]}},
  {"names": ["bpf", "setns"], "action": "SCMP_ACT_ERRNO", "errnoRet": 1, "excludes": {"caps": ["CAP_SYS_ADMIN"]}},
  {"names": ["bpf"], "action": "SCMP_ACT_ALLOW", "includes": {"arches": ["s390x"]}}
 ]}`)
	out, err := SeccompWithBPF(base)
	if err != nil {
		t.Fatal(err)
	}
	var prof struct {
		DefaultAction string           `json:"defaultAction"`
		DefaultErrno  int              `json:"defaultErrnoRet"`
		ArchMap       []any            `json:"archMap"`
		Syscalls      []map[string]any `json:"syscalls"`
	}
	if err := json.Unmarshal(out, &prof); err != nil {
		t.Fatal(err)
	}
	if prof.DefaultAction != "SCMP_ACT_ERRNO" || prof.DefaultErrno != 38 || len(prof.ArchMap) != 1 {
		t.Errorf("top-level fields changed: %+v", prof)
	}
	var bpf []string
	for _, r := range prof.Syscalls {
		names := r["names"].([]any)
		if slices.Contains(names, any("bpf")) {
			if len(names) != 1 {
				t.Errorf("bpf still shares a rule: %v", r)
			}
			b, _ := json.Marshal(r)
			bpf = append(bpf, string(b))
		}
		if slices.Contains(names, any("setns")) && (len(names) != 1) {
			t.Errorf("setns rule: %v", r)
		}
	}
	want := []string{
		`{"action":"SCMP_ACT_ALLOW","comment":"warpflow: bpf(2) with CAP_BPF (Linux \u003e= 5.8), not only with CAP_SYS_ADMIN","includes":{"caps":["CAP_BPF"]},"names":["bpf"]}`,
		`{"action":"SCMP_ACT_ALLOW","excludes":{"caps":["CAP_BPF"]},"includes":{"caps":["CAP_SYS_ADMIN"]},"names":["bpf"]}`,
		`{"action":"SCMP_ACT_ERRNO","errnoRet":1,"excludes":{"caps":["CAP_SYS_ADMIN","CAP_BPF"]},"names":["bpf"]}`,
	}
	if !slices.Equal(bpf, want) {
		t.Errorf("bpf rules:\n%s\nwant:\n%s", strings.Join(bpf, "\n"), strings.Join(want, "\n"))
	}
	// read/write, the two setns rules, bpf's three (its own s390x-only
	// rule is gone: the three cover every architecture).
	if len(prof.Syscalls) != 1+2+3 {
		t.Errorf("%d rules, want read/write, the two setns, and bpf's three", len(prof.Syscalls))
	}
	if _, err := SeccompWithBPF([]byte(`{"syscalls": 3}`)); err == nil {
		t.Error("a profile without a syscalls list was accepted")
	}
	// The distribution's own profile, when there is one.
	if b, err := os.ReadFile(DefaultSeccomp); err == nil {
		if _, err := SeccompWithBPF(b); err != nil {
			t.Errorf("%s: %v", DefaultSeccomp, err)
		}
	}
}

func TestCheckStatic(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh to look at")
	}
	sh, _ = filepath.EvalSymlinks(sh)
	if err := checkStatic(sh); err == nil || !strings.Contains(err.Error(), "not static") {
		t.Errorf("%s (dynamic): %v", sh, err)
	}
}

// testBuild builds the hello command's image into dir.
func testBuild(t *testing.T, dir string) Result {
	t.Helper()
	root, _ := filepath.Abs("../..")
	o := DefaultOptions(root)
	o.Commands = []string{"./internal/image/testdata/hello"}
	o.Output = filepath.Join(dir, "image.tar")
	o.AllowDirty = true
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r, err := Build(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestReproducible builds the same tree twice (into different places,
// the second with the caller's GOFLAGS and CGO settings changed, which
// Build must not let in) and wants the same bytes; then reads the archive
// back: an OCI layout, sorted, one timestamp, the labels, the non-root
// user, the unit's capabilities.
func TestReproducible(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed: the image names its commit")
	}
	t.Setenv("SOURCE_DATE_EPOCH", "1700000000")
	a := testBuild(t, t.TempDir())
	t.Setenv("GOFLAGS", "-buildvcs=true")
	t.Setenv("CGO_ENABLED", "1")
	b := testBuild(t, t.TempDir())
	if a.Manifest != b.Manifest || a.ConfigDigest != b.ConfigDigest || a.Archive != b.Archive {
		t.Fatalf("two builds of one tree differ:\n%+v\n%+v", a, b)
	}
	if !a.Created.Equal(time.Unix(1700000000, 0)) {
		t.Errorf("created %v, want SOURCE_DATE_EPOCH's", a.Created)
	}
	t.Setenv("SOURCE_DATE_EPOCH", "1700000001")
	if c := testBuild(t, t.TempDir()); c.Manifest == a.Manifest {
		t.Error("another timestamp gave the same manifest: the time is not in the image")
	}

	f, err := os.Open(a.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	files := map[string][]byte{}
	var order []string
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		order = append(order, h.Name)
		if !h.ModTime.Equal(a.Created) || h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" {
			t.Errorf("archive entry %s: time %v uid %d gid %d %q %q", h.Name, h.ModTime, h.Uid, h.Gid, h.Uname, h.Gname)
		}
		data, _ := io.ReadAll(tr)
		files[h.Name] = data
	}
	if !slices.IsSorted(order) {
		t.Errorf("archive entries not sorted: %v", order)
	}
	var ociLayout struct{ ImageLayoutVersion string }
	if json.Unmarshal(files["oci-layout"], &ociLayout); ociLayout.ImageLayoutVersion != "1.0.0" {
		t.Errorf("oci-layout: %q", files["oci-layout"])
	}
	var index struct {
		Manifests []struct {
			Digest      string            `json:"digest"`
			MediaType   string            `json:"mediaType"`
			Annotations map[string]string `json:"annotations"`
		} `json:"manifests"`
	}
	if err := json.Unmarshal(files["index.json"], &index); err != nil || len(index.Manifests) != 1 {
		t.Fatalf("index.json: %v %s", err, files["index.json"])
	}
	m := index.Manifests[0]
	if m.Digest != a.Manifest || m.MediaType != "application/vnd.oci.image.manifest.v1+json" || m.Annotations["org.opencontainers.image.ref.name"] != a.Ref {
		t.Errorf("index.json manifest: %+v, want %s named %s", m, a.Manifest, a.Ref)
	}
	blob := func(digest string) []byte {
		b, ok := files["blobs/sha256/"+strings.TrimPrefix(digest, "sha256:")]
		if !ok {
			t.Fatalf("no blob %s", digest)
		}
		return b
	}
	var manifest struct {
		Config struct{ Digest string }
		Layers []struct{ Digest, MediaType string }
	}
	json.Unmarshal(blob(a.Manifest), &manifest)
	if manifest.Config.Digest != a.ConfigDigest || len(manifest.Layers) != 1 || manifest.Layers[0].MediaType != "application/vnd.oci.image.layer.v1.tar+gzip" {
		t.Fatalf("manifest: %+v", manifest)
	}
	var cfg struct {
		Architecture, OS string
		Created          time.Time
		Config           struct {
			User       string
			Entrypoint []string
			Labels     map[string]string
		}
	}
	json.Unmarshal(blob(a.ConfigDigest), &cfg)
	caps, _ := UnitCapabilities("../../cmd/warpflowd/warpflowd.service")
	if cfg.OS != "linux" || cfg.Config.User != "65532:65532" || !cfg.Created.Equal(a.Created) ||
		cfg.Config.Labels["org.opencontainers.image.revision"] != a.Revision || cfg.Config.Labels[CapabilitiesLabel] != strings.Join(caps, " ") ||
		cfg.Config.Labels["org.opencontainers.image.created"] != "2023-11-14T22:13:20Z" || cfg.Config.Labels["org.opencontainers.image.source"] == "" {
		t.Errorf("config: %+v", cfg)
	}
	zr, err := gzip.NewReader(bytes.NewReader(blob(manifest.Layers[0].Digest)))
	if err != nil {
		t.Fatal(err)
	}
	lr := tar.NewReader(zr)
	var layer []string
	for {
		h, err := lr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		layer = append(layer, h.Name)
		if !h.ModTime.Equal(a.Created) || h.Uname != "" {
			t.Errorf("layer entry %s: time %v user %q", h.Name, h.ModTime, h.Uname)
		}
		if h.Name == "usr/local/bin/hello" && (h.Mode != 0o755 || h.Uid != 0) {
			t.Errorf("hello: mode %o uid %d", h.Mode, h.Uid)
		}
		if h.Name == "run/warpflow/" && (h.Uid != User || h.Mode != 0o750) {
			t.Errorf("run/warpflow: uid %d mode %o", h.Uid, h.Mode)
		}
	}
	if !slices.IsSorted(layer) || !slices.Contains(layer, "usr/local/bin/hello") || !slices.Contains(layer, "etc/passwd") {
		t.Errorf("layer entries: %v", layer)
	}
}

func TestUnitStopTimeout(t *testing.T) {
	if d, err := UnitStopTimeout("../../cmd/warpflowd/warpflowd.service"); err != nil || d <= 0 {
		t.Fatalf("the unit's TimeoutStopSec: %v, %v", d, err)
	}
	dir := t.TempDir()
	for unit, want := range map[string]time.Duration{
		"TimeoutStopSec=10\n":                    10 * time.Second,
		"TimeoutStopSec=5\nTimeoutStopSec=30s\n": 30 * time.Second,
		"TimeoutStopSec=2min\n":                  2 * time.Minute,
		"TimeoutStopSec=soon\n":                  0,
		"[Service]\nExecStart=/bin/true\n":       0,
	} {
		p := filepath.Join(dir, "u.service")
		os.WriteFile(p, []byte(unit), 0o644)
		d, err := UnitStopTimeout(p)
		if (want == 0) != (err != nil) || d != want {
			t.Errorf("%q: %v, %v; want %v", unit, d, err, want)
		}
	}
}

// FuzzUnitCapabilities: any unit text gives capabilities or an error,
// never a panic, and what it gives are CAP_ names.
func FuzzUnitCapabilities(f *testing.F) {
	f.Add("AmbientCapabilities=CAP_NET_ADMIN CAP_BPF\nCapabilityBoundingSet=CAP_BPF CAP_NET_ADMIN\nTimeoutStopSec=10\n")
	f.Add("AmbientCapabilities=\n")
	f.Add("AmbientCapabilities=~CAP_X\n")
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, unit string) {
		p := filepath.Join(dir, "u.service")
		if err := os.WriteFile(p, []byte(unit), 0o644); err != nil {
			t.Fatal(err)
		}
		caps, err := UnitCapabilities(p)
		if err == nil && len(caps) == 0 {
			t.Fatal("no error and no capabilities")
		}
		for _, c := range caps {
			if !strings.HasPrefix(c, "CAP_") {
				t.Fatalf("capability %q", c)
			}
		}
		UnitStopTimeout(p)
	})
}
