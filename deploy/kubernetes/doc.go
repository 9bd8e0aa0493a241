// Package kubernetes holds warpflowd's Kubernetes manifests (a kustomize
// base: kustomization.yaml and what it lists) and, in manifests_test.go,
// the test that renders them offline with the kustomize library, decodes
// every object strictly into the k8s.io/api types (an unknown or
// misspelt field fails) and checks what the DaemonSet must hold: host
// networking, /sys/fs/bpf, the systemd unit's capabilities and not
// privileged, the config and pipelines from ConfigMaps (the pipelines'
// mounted as a directory, under a name without a hash suffix, so the
// daemon's watch sees edits), the control socket on a hostPath, requests
// equal to limits, node selection by label, the unit's stop timeout as
// the grace period, a rolling update one node at a time, probes on
// /healthz and /readyz, and Prometheus scraping. There is no Go code here
// besides the test.
package kubernetes
