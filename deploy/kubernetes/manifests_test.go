package kubernetes

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/warpflow/warpflow/internal/daemon"
	"github.com/warpflow/warpflow/internal/image"
	"github.com/warpflow/warpflow/pipelines"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

const unit = "../../cmd/warpflowd/warpflowd.service"

// render runs kustomize (the library, as `kubectl kustomize` does) over
// this directory.
func render(t *testing.T) []byte {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), ".")
	if err != nil {
		t.Fatalf("kustomize: %v", err)
	}
	out, err := m.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// objects are the rendered objects, each decoded strictly into its type.
type objects struct {
	namespaces []corev1.Namespace
	accounts   []corev1.ServiceAccount
	configMaps []corev1.ConfigMap
	services   []corev1.Service
	daemonSets []appsv1.DaemonSet
}

// decode splits a rendering into documents and decodes each strictly
// (sigs.k8s.io/yaml: YAML to JSON, unknown and duplicate fields are
// errors) into the k8s.io/api type its kind names; a kind not expected
// here fails.
func decode(t *testing.T, rendered []byte) objects {
	t.Helper()
	var o objects
	for i, doc := range regexp.MustCompile(`(?m)^---$`).Split(string(rendered), -1) {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		var head struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatalf("document %d: %v", i, err)
		}
		var err error
		switch head.APIVersion + " " + head.Kind {
		case "v1 Namespace":
			o.namespaces = append(o.namespaces, corev1.Namespace{})
			err = yaml.UnmarshalStrict([]byte(doc), &o.namespaces[len(o.namespaces)-1])
		case "v1 ServiceAccount":
			o.accounts = append(o.accounts, corev1.ServiceAccount{})
			err = yaml.UnmarshalStrict([]byte(doc), &o.accounts[len(o.accounts)-1])
		case "v1 ConfigMap":
			o.configMaps = append(o.configMaps, corev1.ConfigMap{})
			err = yaml.UnmarshalStrict([]byte(doc), &o.configMaps[len(o.configMaps)-1])
		case "v1 Service":
			o.services = append(o.services, corev1.Service{})
			err = yaml.UnmarshalStrict([]byte(doc), &o.services[len(o.services)-1])
		case "apps/v1 DaemonSet":
			o.daemonSets = append(o.daemonSets, appsv1.DaemonSet{})
			err = yaml.UnmarshalStrict([]byte(doc), &o.daemonSets[len(o.daemonSets)-1])
		default:
			t.Fatalf("document %d: unexpected %s %s", i, head.APIVersion, head.Kind)
		}
		if err != nil {
			t.Fatalf("document %d (%s): %v", i, head.Kind, err)
		}
	}
	// kustomize versions order objects differently: compare by name.
	slices.SortFunc(o.configMaps, func(a, b corev1.ConfigMap) int { return strings.Compare(a.Name, b.Name) })
	if len(o.namespaces) != 1 || len(o.accounts) != 1 || len(o.configMaps) != 2 || len(o.services) != 1 || len(o.daemonSets) != 1 {
		t.Fatalf("rendered %d namespaces, %d service accounts, %d config maps, %d services, %d daemon sets; want 1, 1, 2, 1, 1",
			len(o.namespaces), len(o.accounts), len(o.configMaps), len(o.services), len(o.daemonSets))
	}
	return o
}

// TestStrictDecodingCatchesTypos: the decoding the manifest test relies
// on refuses a misspelt field, so a check below cannot pass on a field
// Kubernetes would ignore or refuse.
func TestStrictDecodingCatchesTypos(t *testing.T) {
	var ds appsv1.DaemonSet
	err := yaml.UnmarshalStrict([]byte("apiVersion: apps/v1\nkind: DaemonSet\nspec:\n  template:\n    spec:\n      hostNetwrok: true\n"), &ds)
	if err == nil || !strings.Contains(err.Error(), "hostNetwrok") {
		t.Fatalf("a misspelt field decoded: %v", err)
	}
}

func TestManifests(t *testing.T) {
	rendered := render(t)
	o := decode(t, rendered)
	ns := o.namespaces[0]
	if ns.Labels["pod-security.kubernetes.io/enforce"] != "privileged" {
		t.Errorf("namespace %s: Pod Security %q; host networking and NET_ADMIN need privileged", ns.Name, ns.Labels["pod-security.kubernetes.io/enforce"])
	}
	for _, m := range []struct{ kind, name, ns string }{
		{"ServiceAccount", o.accounts[0].Name, o.accounts[0].Namespace},
		{"Service", o.services[0].Name, o.services[0].Namespace},
		{"DaemonSet", o.daemonSets[0].Name, o.daemonSets[0].Namespace},
		{"ConfigMap", o.configMaps[0].Name, o.configMaps[0].Namespace},
		{"ConfigMap", o.configMaps[1].Name, o.configMaps[1].Namespace},
	} {
		if m.ns != ns.Name {
			t.Errorf("%s %s in namespace %q, want %q", m.kind, m.name, m.ns, ns.Name)
		}
	}
	if sa := o.accounts[0]; sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken {
		t.Error("the service account mounts an API token; warpflowd never uses the API")
	}

	ds := o.daemonSets[0]
	pod := ds.Spec.Template.Spec
	if !pod.HostNetwork || pod.DNSPolicy != corev1.DNSClusterFirstWithHostNet {
		t.Errorf("hostNetwork %v, dnsPolicy %q: AF_XDP binds the node's own interfaces", pod.HostNetwork, pod.DNSPolicy)
	}
	if pod.NodeSelector["warpflow.dev/dataplane"] != "true" {
		t.Errorf("nodeSelector %v: want nodes chosen by the label warpflow.dev/dataplane=true", pod.NodeSelector)
	}
	if pod.ServiceAccountName != o.accounts[0].Name || pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Errorf("service account %q, automount %v", pod.ServiceAccountName, pod.AutomountServiceAccountToken)
	}
	// A rolling update that never has two nodes' dataplanes down: one at
	// a time, and no second daemon beside a running one.
	us := ds.Spec.UpdateStrategy
	if us.Type != appsv1.RollingUpdateDaemonSetStrategyType || us.RollingUpdate == nil || us.RollingUpdate.MaxUnavailable == nil ||
		us.RollingUpdate.MaxUnavailable.String() != "1" || us.RollingUpdate.MaxSurge == nil || us.RollingUpdate.MaxSurge.String() != "0" {
		t.Errorf("update strategy %+v: want RollingUpdate, maxUnavailable 1, maxSurge 0", us)
	}
	stop, err := image.UnitStopTimeout(unit)
	if err != nil {
		t.Fatal(err)
	}
	if g := pod.TerminationGracePeriodSeconds; g == nil || *g != int64(stop.Seconds()) {
		t.Errorf("terminationGracePeriodSeconds %v, want the unit's TimeoutStopSec (%v): the same drain time", ptrString(g), stop)
	}
	if len(pod.Containers) != 1 || len(pod.InitContainers) != 0 {
		t.Fatalf("%d containers, %d init containers: want warpflowd alone", len(pod.Containers), len(pod.InitContainers))
	}
	c := pod.Containers[0]
	if c.Image != "localhost/warpflow:latest" {
		t.Errorf("image %q: the kustomization's images entry did not apply", c.Image)
	}

	// Capabilities, not privileged: exactly the unit's.
	caps, err := image.UnitCapabilities(unit)
	if err != nil {
		t.Fatal(err)
	}
	sc := c.SecurityContext
	if sc == nil || sc.Capabilities == nil {
		t.Fatal("no securityContext.capabilities")
	}
	var added []string
	for _, a := range sc.Capabilities.Add {
		added = append(added, string(a))
	}
	if want := image.Short(caps); !sameSet(added, want) {
		t.Errorf("capabilities.add %v, want the unit's %v", added, want)
	}
	if !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("capabilities.drop %v, want [ALL]", sc.Capabilities.Drop)
	}
	if sc.Privileged == nil || *sc.Privileged || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("securityContext %+v: want privileged false, allowPrivilegeEscalation false, readOnlyRootFilesystem true", sc)
	}
	if sc.RunAsUser == nil || *sc.RunAsUser != 0 {
		t.Errorf("runAsUser %v: Kubernetes sets no ambient capabilities, so only uid 0 holds the added ones", sc.RunAsUser)
	}
	if pod.SecurityContext != nil && pod.SecurityContext.SeccompProfile != nil && sc.SeccompProfile == nil {
		t.Error("a pod-level seccomp profile without the container's: bpf(2) may be refused")
	}

	// Requests and limits, equal (Guaranteed QoS: exclusive CPUs under
	// the static CPU manager).
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		req, lim := c.Resources.Requests[r], c.Resources.Limits[r]
		if req.IsZero() || lim.IsZero() || req.Cmp(lim) != 0 {
			t.Errorf("%s: request %v, limit %v: want both, equal", r, req.String(), lim.String())
		}
	}

	// Volumes and their mounts.
	vols := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		vols[v.Name] = v
	}
	mount := func(dir string) (corev1.VolumeMount, corev1.Volume) {
		t.Helper()
		for _, m := range c.VolumeMounts {
			if path.Clean(m.MountPath) == dir {
				v, ok := vols[m.Name]
				if !ok {
					t.Fatalf("mount %s names no volume %q", dir, m.Name)
				}
				return m, v
			}
		}
		t.Fatalf("nothing is mounted at %s", dir)
		return corev1.VolumeMount{}, corev1.Volume{}
	}
	if _, v := mount("/sys/fs/bpf"); v.HostPath == nil || v.HostPath.Path != "/sys/fs/bpf" {
		t.Errorf("/sys/fs/bpf: volume %+v, want the node's bpffs", v.VolumeSource)
	}

	// The daemon's config from a ConfigMap, read by the daemon's own
	// strict loader and validated; the pipeline it names compiles.
	cfgFile := flagValue(t, c.Args, "--config")
	cfgMount, cfgVol := mount(path.Dir(cfgFile))
	if cfgVol.ConfigMap == nil || cfgMount.SubPath != "" || !cfgMount.ReadOnly {
		t.Fatalf("config at %s: volume %+v mount %+v: want a ConfigMap directory, read-only", cfgFile, cfgVol.VolumeSource, cfgMount)
	}
	cfgCM := configMap(t, o, cfgVol.ConfigMap.Name)
	if !regexp.MustCompile(`^warpflow-config-[a-z0-9]{10}$`).MatchString(cfgCM.Name) {
		t.Errorf("the daemon config's ConfigMap %q has no hash suffix: a change would not restart the daemons to apply it", cfgCM.Name)
	}
	cfg := daemonConfig(t, cfgCM, path.Base(cfgFile))
	if !cfg.Watch {
		t.Error("the daemon config does not set watch: true: a pipeline edit would need a restart")
	}
	pipeMount, pipeVol := mount(path.Dir(cfg.Pipeline))
	if pipeVol.ConfigMap == nil || pipeMount.SubPath != "" || !pipeMount.ReadOnly {
		t.Fatalf("pipeline %s: volume %+v mount %+v: want a ConfigMap directory (a subPath mount never sees an update)", cfg.Pipeline, pipeVol.VolumeSource, pipeMount)
	}
	pipeCM := configMap(t, o, pipeVol.ConfigMap.Name)
	if pipeCM.Name != "warpflow-pipelines" {
		t.Errorf("the pipelines' ConfigMap is %q: a hash suffix would replace it (and restart the pods) on every edit instead of updating the files the daemons watch", pipeCM.Name)
	}
	src, ok := pipeCM.Data[path.Base(cfg.Pipeline)]
	if !ok {
		t.Fatalf("ConfigMap %s has no %s (keys %v)", pipeCM.Name, path.Base(cfg.Pipeline), keys(pipeCM.Data))
	}
	if _, err := pipelines.Load(path.Base(cfg.Pipeline), []byte(src)); err != nil {
		t.Errorf("the ConfigMap's pipeline does not compile: %v", err)
	}

	// The control socket's directory on a hostPath, for warpctl on the node.
	if _, v := mount(path.Dir(cfg.Control.Socket)); v.HostPath == nil || v.HostPath.Path != path.Dir(cfg.Control.Socket) {
		t.Errorf("control socket %s: volume %+v, want a hostPath of the same directory", cfg.Control.Socket, v.VolumeSource)
	}

	// Metrics and probes: one port, on the node's address (the kubelet
	// probes the pod IP, which with hostNetwork is the node's).
	var metrics *corev1.ContainerPort
	for i, p := range c.Ports {
		if p.Name == "metrics" {
			metrics = &c.Ports[i]
		}
	}
	if metrics == nil {
		t.Fatal("no container port named metrics")
	}
	if addr := flagValue(t, c.Args, "--metrics-addr"); addr != fmt.Sprintf("$(NODE_IP):%d", metrics.ContainerPort) {
		t.Errorf("--metrics-addr %q, want $(NODE_IP):%d", addr, metrics.ContainerPort)
	} else if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
		return e.Name == "NODE_IP" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "status.hostIP"
	}) {
		t.Error("NODE_IP is not the downward API's status.hostIP")
	}
	probe := func(name string, p *corev1.Probe, want string) {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != want || p.HTTPGet.Port.String() != "metrics" {
			t.Errorf("%s probe %+v: want GET %s on the metrics port", name, p, want)
		}
	}
	probe("readiness", c.ReadinessProbe, "/readyz")
	probe("liveness", c.LivenessProbe, "/healthz")
	an := ds.Spec.Template.Annotations
	if an["prometheus.io/scrape"] != "true" || an["prometheus.io/port"] != fmt.Sprint(metrics.ContainerPort) || an["prometheus.io/path"] != "/metrics" {
		t.Errorf("pod annotations %v: want prometheus.io scrape, port %d, path /metrics", an, metrics.ContainerPort)
	}
	svc := o.services[0]
	for k, v := range svc.Spec.Selector {
		if ds.Spec.Template.Labels[k] != v {
			t.Errorf("service %s selects %s=%s, which the pods lack", svc.Name, k, v)
		}
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort.String() != "metrics" || svc.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Errorf("service %s: %+v, want a headless service over the metrics port", svc.Name, svc.Spec)
	}
	for k, v := range ds.Spec.Selector.MatchLabels {
		if ds.Spec.Template.Labels[k] != v {
			t.Errorf("the DaemonSet's selector %s=%s does not match its pods", k, v)
		}
	}

	crossCheckKubectl(t, rendered)
}

// crossCheckKubectl renders with `kubectl kustomize` too where kubectl is
// installed (Debian 12's kubernetes-client is kubectl 1.20, kustomize
// v2.0.3; newer ones embed kustomize v5) and wants the same objects, up
// to the generated ConfigMap's hash suffix, which each kustomize version
// computes its own way.
func crossCheckKubectl(t *testing.T, rendered []byte) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Log("kubectl is not installed: rendered with the kustomize library only")
		return
	}
	cmd := exec.Command(kubectl, "kustomize", ".")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kubectl kustomize: %v\n%s", err, stderr.String())
	}
	suffix := regexp.MustCompile(`warpflow-config-[a-z0-9]{10}\b`)
	norm := func(b []byte) objects { return decode(t, suffix.ReplaceAll(b, []byte("warpflow-config-HASH"))) }
	a, b := norm(rendered), norm(out)
	if !reflect.DeepEqual(a, b) {
		t.Errorf("kubectl kustomize renders other objects than the kustomize library:\n--- library\n%s\n--- kubectl\n%s", rendered, out)
	}
}

func flagValue(t *testing.T, args []string, flag string) string {
	t.Helper()
	i := slices.Index(args, flag)
	if i < 0 || i+1 >= len(args) {
		t.Fatalf("args %v have no %s VALUE", args, flag)
	}
	return args[i+1]
}

func configMap(t *testing.T, o objects, name string) corev1.ConfigMap {
	t.Helper()
	for _, cm := range o.configMaps {
		if cm.Name == name {
			return cm
		}
	}
	t.Fatalf("no ConfigMap %q rendered", name)
	return corev1.ConfigMap{}
}

// daemonConfig parses and validates the daemon config in cm's key.
func daemonConfig(t *testing.T, cm corev1.ConfigMap, key string) daemon.Config {
	t.Helper()
	data, ok := cm.Data[key]
	if !ok {
		t.Fatalf("ConfigMap %s has no %s (keys %v)", cm.Name, key, keys(cm.Data))
	}
	p := filepath.Join(t.TempDir(), key)
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := daemon.LoadConfig(p)
	if err == nil {
		err = cfg.Validate()
	}
	if err != nil {
		t.Fatalf("the ConfigMap's daemon config: %v", err)
	}
	if !filepath.IsAbs(cfg.Pipeline) || !filepath.IsAbs(cfg.Control.Socket) {
		t.Fatalf("pipeline %q and control.socket %q: want absolute paths inside the container", cfg.Pipeline, cfg.Control.Socket)
	}
	return cfg
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

func ptrString[T any](p *T) string {
	if p == nil {
		return "unset"
	}
	return fmt.Sprint(*p)
}
