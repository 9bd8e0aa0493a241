// Command mkimage builds Warpflow's OCI image archive (package
// internal/image); scripts/image runs it from the module's root.
//
//	mkimage [-o bin/warpflow-image.tar] [-arch amd64] [-allow-dirty] [-json]
//	mkimage -seccomp bin/warpflow-seccomp.json [-seccomp-from /usr/share/containers/seccomp.json]
//
// The second form builds no image: it writes podman's default seccomp
// profile with bpf(2) allowed under CAP_BPF (image.SeccompWithBPF), for
// `podman run --security-opt seccomp=FILE`.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/warpflow/warpflow/internal/image"
)

func main() {
	root, err := os.Getwd()
	if err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(1)
	}
	o := image.DefaultOptions(root)
	flag.StringVar(&o.Output, "o", o.Output, "the archive to write")
	flag.StringVar(&o.GOARCH, "arch", o.GOARCH, "the architecture to build for (GOARCH)")
	flag.BoolVar(&o.AllowDirty, "allow-dirty", false, "build from a tree with uncommitted changes (the version ends in -dirty)")
	asJSON := flag.Bool("json", false, "print the result as JSON")
	seccompOut := flag.String("seccomp", "", "write a seccomp profile that allows bpf(2) under CAP_BPF to this file (and build no image)")
	seccompFrom := flag.String("seccomp-from", image.DefaultSeccomp, "the profile -seccomp starts from")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "mkimage: no arguments expected; see -h")
		os.Exit(2)
	}
	if *seccompOut != "" {
		base, err := os.ReadFile(*seccompFrom)
		if err == nil {
			var prof []byte
			if prof, err = image.SeccompWithBPF(base); err == nil {
				err = os.WriteFile(*seccompOut, append(prof, '\n'), 0o644)
			}
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "mkimage: seccomp:", err)
			os.Exit(1)
		}
		fmt.Println(*seccompOut)
		return
	}
	// The library's deprecated estargz experiment would change the layer.
	os.Unsetenv("GGCR_EXPERIMENT_ESTARGZ")
	if !*asJSON {
		o.Log = os.Stderr
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	r, err := image.Build(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(1)
	}
	if *asJSON {
		json.NewEncoder(os.Stdout).Encode(r)
		return
	}
	fmt.Printf("%s\n  ref       %s\n  manifest  %s\n  config    %s\n  archive   sha256:%s\n  load with: podman load -i %s\n", r.Path, r.Ref, r.Manifest, r.ConfigDigest, r.Archive, r.Path)
}
