package control

import (
	"os/exec"
	"reflect"
	"strings"
	"testing"

	"github.com/warpflow/warpflow/counters"
)

// TestWireSnakeCase: every field of every reply and request type the API
// puts on the wire is named snake_case in JSON (a field without a json
// tag would go out under its Go name), walked through every nested type.
func TestWireSnakeCase(t *testing.T) {
	seen := map[reflect.Type]bool{}
	var walk func(typ reflect.Type, at string)
	walk = func(typ reflect.Type, at string) {
		for typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice || typ.Kind() == reflect.Array || typ.Kind() == reflect.Map {
			if typ.Kind() == reflect.Map && typ.Key().Kind() != reflect.String {
				t.Errorf("%s: a map keyed by %s", at, typ.Key())
			}
			typ = typ.Elem()
		}
		if typ.Kind() != reflect.Struct || seen[typ] || typ.PkgPath() == "time" {
			return
		}
		seen[typ] = true
		for i := range typ.NumField() {
			f := typ.Field(i)
			if !f.IsExported() {
				continue
			}
			tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			switch {
			case tag == "-":
				continue
			case tag == "" && f.Anonymous:
				walk(f.Type, at+"."+f.Name) // flattened
				continue
			case !counters.Snake(tag):
				t.Errorf("%s.%s goes out as %q: not snake_case", at, f.Name, tag)
			}
			walk(f.Type, at+"."+tag)
		}
	}
	for _, v := range []any{Stats{}, PortsReply{}, SwapReply{}, PipelineList{}, PipelineDetail{}, LoadRequest{}, CaptureRequest{},
		CaptureInfo{}, ErrorReply{}, ConntrackReply{}, ConntrackQuery{}, Readiness{}} {
		walk(reflect.TypeOf(v), reflect.TypeOf(v).Name())
	}
	if !seen[reflect.TypeOf(counters.KeyValue{})] || !seen[reflect.TypeOf(ProgramCounters{})] {
		t.Fatal("the walk did not reach the nested types")
	}
}

// TestClientDeps: the client decodes the wire types without linking the
// data path: no cilium/ebpf, no xdp, afxdp, workers or dataplane.
func TestClientDeps(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "./client").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps ./client: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list -deps listed %d packages: %s", len(deps), out)
	}
	for _, d := range deps {
		switch {
		case strings.Contains(d, "cilium/ebpf"), strings.HasSuffix(d, "warpflow/xdp"), strings.HasSuffix(d, "warpflow/workers"),
			strings.HasSuffix(d, "warpflow/dataplane"), strings.Contains(d, "warpflow/dataplane/"):
			t.Errorf("the client links %s", d)
		}
	}
}
