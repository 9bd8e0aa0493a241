// Package image builds Warpflow's OCI image without a container daemon:
// the static binary (CGO_ENABLED=0) of warpflowd on an empty base ("from
// scratch"), written as an OCI image layout in a tar
// archive that `podman load -i` (or `skopeo copy oci-archive:...`) takes.
// scripts/image runs it (through mkimage) and writes
// bin/warpflow-image.tar.
//
// # Reproducible
//
// The same commit built with the same Go toolchain gives the same bytes,
// and so the same manifest and config digests, on any machine and in any
// checkout (a clone, a git worktree, a tarball with SOURCE_DATE_EPOCH):
//   - the binaries are built with fixed flags whatever the caller's
//     environment says: -trimpath (no build paths), -buildvcs=false (Go
//     stamps VCS data only in some checkouts: it does not see a git
//     worktree; the commit goes in the image's labels instead),
//     -ldflags "-s -w -buildid=", -tags nocuda, CGO_ENABLED=0, GOFLAGS and
//     GOEXPERIMENT cleared, GOAMD64=v1;
//   - every tar entry (the layer's and the archive's) is written in
//     sorted order with uid/gid 0 (but the state directories), no user
//     or group names, fixed modes and one timestamp: the commit's time,
//     or SOURCE_DATE_EPOCH when set; the config's created time and the
//     history's are the same;
//   - the layer is compressed here with compress/gzip at a fixed level
//     and no header name or time, not by whatever the library defaults
//     to.
//
// The Go toolchain's version is a label (dev.warpflow.go-version):
// another toolchain gives other binaries, so another digest.
//
// # What the image holds
//
//	/usr/local/bin/warpflowd    0755 root
//	/etc/passwd, /etc/group     root and warpflow (65532)
//	/etc/warpflow/              0755 root: mount the config and pipelines here
//	/run/warpflow/              0750 warpflow: the control socket's directory
//	/var/lib/warpflow/          0750 warpflow: state (captures)
//
// The default user is warpflow (65532:65532), not root; the entrypoint is
// warpflowd with `--config /etc/warpflow/warpflowd.yaml`. Build refuses a
// binary that is not static (an ELF interpreter or NEEDED libraries).
//
// Both binaries are built with -tags nocuda: the CUDA backend loads
// libcuda through purego, and purego under CGO_ENABLED=0 (its fakecgo)
// links the binary against the C loader, libc, libdl and libpthread, which
// a scratch image does not have (nor libcuda). The image's warpflowd and
// warpctl therefore run the CPU backend only, and `backend: cuda` stops at
// start with "cuda backend unavailable: this binary was built without the
// CUDA backend" (gpu/driver_nocuda.go). warpctl is in the image for
// `kubectl exec ... warpctl stats` against the pod's own socket.
//
// # Capabilities
//
// warpflowd needs the capabilities the systemd unit
// (cmd/warpflowd/warpflowd.service) lists; UnitCapabilities reads them from
// the unit, the image carries them in the label dev.warpflow.capabilities,
// and the tests (the podman one, the Kubernetes manifests') take them from
// the unit so that no copy drifts. How a runtime grants them to the
// non-root default user differs:
//   - podman gives a non-root container user the added capabilities as
//     ambient ones: `podman run --user 65532 --cap-drop all --cap-add
//     NET_ADMIN,...` runs the daemon unprivileged, like the unit.
//   - Docker and Kubernetes (containerd, CRI-O) do not set ambient
//     capabilities, and the image sets no file capabilities (they would
//     make exec fail outright where a capability is missing, and
//     no_new_privs drops them): there, run the container as uid 0 with
//     every other capability dropped (`--user 0 --cap-drop all --cap-add
//     ...`; the DaemonSet in deploy/kubernetes does so).
package image
