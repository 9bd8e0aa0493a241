package image

import (
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The image's fixed facts.
const (
	// User is the default user and group: not root (distroless's
	// "nonroot" number, so volume ownership conventions carry over).
	User    = 65532
	Repo    = "localhost/warpflow"
	BinDir  = "usr/local/bin"
	Config  = "/etc/warpflow/warpflowd.yaml"
	Source  = "https://github.com/warpflow/warpflow"
	capsKey = "dev.warpflow.capabilities"
	goKey   = "dev.warpflow.go-version"
)

// CapabilitiesLabel is the label holding the capabilities warpflowd needs
// (space-separated, CAP_ prefixed, from the systemd unit).
const CapabilitiesLabel = capsKey

// Options says what to build.
type Options struct {
	// Root is the module's root (the directory with go.mod).
	Root string
	// Output is the archive to write (replaced atomically).
	Output string
	// Commands are the module's commands to put in /usr/local/bin.
	Commands []string
	// Unit is the systemd unit the capabilities are read from.
	Unit string
	// GOARCH is the architecture to build for (runtime.GOARCH by default).
	GOARCH string
	// AllowDirty builds from a tree with uncommitted changes; the version
	// then ends in -dirty and the image is not what the commit gives.
	AllowDirty bool
	// Go is the go command.
	Go string
	// Log gets one line per step (nil: none).
	Log io.Writer
}

// DefaultOptions builds warpflowd and warpctl from the module at root into
// root/bin/warpflow-image.tar, with -tags nocuda (see doc.go: the CUDA
// backend's purego loader would make the binaries dynamic).
func DefaultOptions(root string) Options {
	return Options{
		Root:     root,
		Output:   filepath.Join(root, "bin", "warpflow-image.tar"),
		Commands: []string{"./cmd/warpflowd", "./cmd/warpctl"},
		Unit:     filepath.Join(root, "cmd", "warpflowd", "warpflowd.service"),
		GOARCH:   runtime.GOARCH,
		Go:       "go",
	}
}

// Result says what was built.
type Result struct {
	Path string `json:"path"`
	// Ref is the name `podman load` gives the image.
	Ref string `json:"ref"`
	// Manifest and ConfigDigest are the image's manifest digest (what a
	// registry pins) and config digest (podman's image ID); Archive is
	// the archive file's own sha256.
	Manifest     string    `json:"manifest_digest"`
	ConfigDigest string    `json:"config_digest"`
	Archive      string    `json:"archive_sha256"`
	Revision     string    `json:"revision"`
	Version      string    `json:"version"`
	Created      time.Time `json:"created"`
	Capabilities []string  `json:"capabilities"`
	GoVersion    string    `json:"go_version"`
}

// Build compiles the commands and writes the image archive.
func Build(ctx context.Context, o Options) (Result, error) {
	var r Result
	if o.Root == "" || o.Output == "" || len(o.Commands) == 0 || o.Unit == "" {
		return r, errors.New("image: Root, Output, Commands and Unit are required")
	}
	if o.GOARCH == "" {
		o.GOARCH = runtime.GOARCH
	}
	if o.Go == "" {
		o.Go = "go"
	}
	logf := func(format string, args ...any) {
		if o.Log != nil {
			fmt.Fprintf(o.Log, format+"\n", args...)
		}
	}
	src, err := sourceOf(ctx, o.Root)
	if err != nil {
		return r, err
	}
	if src.dirty && !o.AllowDirty {
		return r, fmt.Errorf("image: %s has uncommitted changes (%s): commit them first, or allow a dirty build (its image is not the commit's)", o.Root, src.dirtyWhat)
	}
	caps, err := UnitCapabilities(o.Unit)
	if err != nil {
		return r, err
	}
	goVersion, err := output(ctx, o.Root, nil, o.Go, "env", "GOVERSION")
	if err != nil {
		return r, fmt.Errorf("image: go env GOVERSION: %w", err)
	}
	r = Result{Path: o.Output, Revision: src.revision, Version: src.version, Created: src.created, Capabilities: caps, GoVersion: goVersion}
	r.Ref = Repo + ":" + src.version

	tmp, err := os.MkdirTemp("", "warpflow-image-")
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(tmp)
	var bins []file
	for _, pkg := range o.Commands {
		name := filepath.Base(pkg)
		out := filepath.Join(tmp, "bin", name)
		logf("build %s (CGO_ENABLED=0 GOARCH=%s, -trimpath -buildvcs=false)", pkg, o.GOARCH)
		if err := goBuild(ctx, o, pkg, out); err != nil {
			return r, err
		}
		if err := checkStatic(out); err != nil {
			return r, err
		}
		data, err := os.ReadFile(out)
		if err != nil {
			return r, err
		}
		bins = append(bins, file{name: BinDir + "/" + name, mode: 0o755, data: data})
	}
	img, err := assemble(src, caps, goVersion, o.GOARCH, bins)
	if err != nil {
		return r, err
	}
	d, err := img.Digest()
	if err != nil {
		return r, err
	}
	cd, err := img.ConfigName()
	if err != nil {
		return r, err
	}
	r.Manifest, r.ConfigDigest = d.String(), cd.String()
	logf("image %s: manifest %s, config %s", r.Ref, r.Manifest, r.ConfigDigest)
	sum, err := writeArchive(img, r.Ref, src.created, o.Output, tmp)
	if err != nil {
		return r, err
	}
	r.Archive = sum
	logf("wrote %s (sha256 %s)", o.Output, sum)
	return r, nil
}

// source is what the image records of the tree it was built from.
type source struct {
	revision, version string
	created           time.Time
	dirty             bool
	dirtyWhat         string
}

func sourceOf(ctx context.Context, root string) (source, error) {
	var s source
	rev, err := output(ctx, root, nil, "git", "rev-parse", "HEAD")
	if err != nil {
		return s, fmt.Errorf("image: the commit of %s: %w (the image names its commit: build in a git checkout)", root, err)
	}
	s.revision = rev
	s.version = "git-" + rev[:12]
	status, err := output(ctx, root, nil, "git", "status", "--porcelain", "--untracked-files=normal")
	if err != nil {
		return s, fmt.Errorf("image: git status: %w", err)
	}
	if status != "" {
		s.dirty = true
		lines := strings.Split(status, "\n")
		s.dirtyWhat = strings.Join(lines[:min(3, len(lines))], "; ")
		if len(lines) > 3 {
			s.dirtyWhat += fmt.Sprintf("; and %d more", len(lines)-3)
		}
		s.version += "-dirty"
	}
	epoch := os.Getenv("SOURCE_DATE_EPOCH")
	if epoch == "" {
		if epoch, err = output(ctx, root, nil, "git", "log", "-1", "--format=%ct", "HEAD"); err != nil {
			return s, fmt.Errorf("image: commit time: %w", err)
		}
	}
	sec, err := strconv.ParseInt(epoch, 10, 64)
	if err != nil || sec < 0 {
		return s, fmt.Errorf("image: SOURCE_DATE_EPOCH or commit time %q: want seconds since 1970", epoch)
	}
	s.created = time.Unix(sec, 0).UTC()
	return s, nil
}

// goBuild builds pkg to out with the fixed flags (see doc.go): the
// caller's GOFLAGS, GOEXPERIMENT and CGO settings do not leak in.
func goBuild(ctx context.Context, o Options, pkg, out string) error {
	env := []string{"CGO_ENABLED=0", "GOOS=linux", "GOARCH=" + o.GOARCH, "GOFLAGS=", "GOEXPERIMENT=", "GOAMD64=v1", "GOARM64=v8.0"}
	_, err := output(ctx, o.Root, env, o.Go, "build", "-tags=nocuda", "-trimpath", "-buildvcs=false", "-ldflags=-s -w -buildid=", "-o", out, pkg)
	if err != nil {
		return fmt.Errorf("image: go build %s: %w", pkg, err)
	}
	return nil
}

// checkStatic refuses a binary that needs a dynamic loader or libraries:
// the image has none.
func checkStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("image: %s: %w", path, err)
	}
	defer f.Close()
	var why []string
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			why = append(why, "an ELF interpreter")
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		why = append(why, fmt.Sprintf("shared libraries %v", libs))
	}
	if len(why) > 0 {
		return fmt.Errorf("image: %s is not static although built with CGO_ENABLED=0 (it needs %s: a dependency such as purego's fakecgo links the C loader): the image holds no libc", filepath.Base(path), strings.Join(why, " and "))
	}
	return nil
}

// assemble makes the image: one layer, the config, the labels.
func assemble(src source, caps []string, goVersion, arch string, bins []file) (v1.Image, error) {
	layerTar, err := rootfs(src.created, bins)
	if err != nil {
		return nil, err
	}
	gz, err := gzipBytes(layerTar)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(gz)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("image: layer: %w", err)
	}
	created := v1.Time{Time: src.created}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History: v1.History{
			Created:   created,
			CreatedBy: "scripts/image (internal/image): static binaries on an empty base",
		},
	})
	if err != nil {
		return nil, fmt.Errorf("image: append layer: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS, cf.Created = arch, "linux", created
	if arch == "arm64" {
		cf.Variant = "v8"
	}
	cf.Config = v1.Config{
		User:       fmt.Sprintf("%d:%d", User, User),
		Entrypoint: []string{"/" + BinDir + "/warpflowd"},
		Cmd:        []string{"--config", Config},
		Env:        []string{"PATH=/" + BinDir},
		WorkingDir: "/",
		StopSignal: "SIGTERM",
		Labels: map[string]string{
			"org.opencontainers.image.title":         "warpflow",
			"org.opencontainers.image.description":   "Warpflow's AF_XDP packet-processing dataplane daemon (warpflowd). Needs host networking and the capabilities in " + capsKey + ".",
			"org.opencontainers.image.source":        Source,
			"org.opencontainers.image.url":           Source,
			"org.opencontainers.image.documentation": Source + "#readme",
			"org.opencontainers.image.revision":      src.revision,
			"org.opencontainers.image.version":       src.version,
			"org.opencontainers.image.created":       src.created.Format(time.RFC3339),
			"org.opencontainers.image.base.name":     "scratch",
			capsKey:                                  strings.Join(caps, " "),
			goKey:                                    goVersion,
		},
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("image: config: %w", err)
	}
	return img, nil
}

// writeArchive writes img as an OCI image layout (named ref) in a tar at
// out, through a file in out's directory renamed into place, and returns
// the archive's sha256.
func writeArchive(img v1.Image, ref string, mtime time.Time, out, tmp string) (string, error) {
	dir := filepath.Join(tmp, "layout")
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return "", fmt.Errorf("image: layout: %w", err)
	}
	// ref.name is what podman and skopeo name the image on load.
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": ref})); err != nil {
		return "", fmt.Errorf("image: layout: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return "", err
	}
	f, err := os.CreateTemp(filepath.Dir(out), ".warpflow-image-*.tar")
	if err != nil {
		return "", err
	}
	defer os.Remove(f.Name())
	h := sha256.New()
	if err := tarDir(io.MultiWriter(f, h), dir, mtime); err != nil {
		f.Close()
		return "", fmt.Errorf("image: archive: %w", err)
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		return "", err
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	if err := os.Rename(f.Name(), out); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// output runs name in dir (env added to the environment) and returns its
// trimmed stdout; an error carries the end of its stderr.
func output(ctx context.Context, dir string, env []string, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if len(msg) > 2000 {
			msg = "..." + msg[len(msg)-2000:]
		}
		if msg != "" {
			return "", fmt.Errorf("%s: %w: %s", name, err, msg)
		}
		return "", fmt.Errorf("%s: %w", name, err)
	}
	return strings.TrimSpace(stdout.String()), nil
}
