package pipelines

import (
	"fmt"
	"io"
	"os"
	"reflect"
	"regexp"
	"strings"
	"sync"

	"github.com/warpflow/warpflow/internal/yamlbound"
	"go.yaml.in/yaml/v3"
)

// maxEcho is how much of a value from the config a message quotes: a
// config may come from a client, and its errors go back to it and to the
// daemon's log.
const maxEcho = 40

// ReadConfigFile reads a config file of at most MaxConfigBytes, reading
// no more than one byte past the limit (a huge file, or /dev/zero, is
// refused without being read whole).
func ReadConfigFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// A regular file's size sizes the buffer (io.ReadAll's doubling from
	// 512 bytes touches about twice the file: a 1 MiB file cost 1.9 MB of
	// RSS to refuse); the read still stops one byte past the limit if the
	// file grew since, and a pipe or FIFO starts small.
	hint := 512
	if st, err := f.Stat(); err == nil && st.Mode().IsRegular() {
		if st.Size() > MaxConfigBytes {
			return nil, tooLarge(path)
		}
		hint = int(st.Size()) + 1
	}
	data, err := ReadAllSized(io.LimitReader(f, MaxConfigBytes+1), hint)
	if err != nil {
		return nil, err
	}
	if len(data) > MaxConfigBytes {
		return nil, tooLarge(path)
	}
	return data, nil
}

func tooLarge(path string) error {
	return fmt.Errorf("%s: larger than the limit of %d bytes for a config", path, MaxConfigBytes)
}

// ReadAllSized is io.ReadAll starting with capacity hint: a reader that
// ends within hint bytes is read into one allocation of that size
// (io.ReadAll starts at 512 and doubles, touching about twice the input).
func ReadAllSized(r io.Reader, hint int) ([]byte, error) {
	b := make([]byte, 0, hint)
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
}

// clip quotes s for a message, at most maxEcho bytes of it.
func clip(s string) string { return yamlbound.Quote(s, maxEcho) }

// clipRaw is clip for a value printed without quotes (a number).
func clipRaw(s string) string {
	if len(s) <= maxEcho {
		return s
	}
	q := yamlbound.Quote(s, maxEcho)
	return q[1:len(q)-4] + "..."
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)

func validName(s string) bool { return len(s) <= 64 && nameRE.MatchString(s) }

// mappingValue returns the value node of key in mapping n, or nil.
func mappingValue(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

type strictErr struct {
	node *yaml.Node
	msg  string
}

// strictCheck walks node n against the Go type of v and reports keys that
// the type does not name (yaml.v3's KnownFields is only available on a
// Decoder, not on Node.Decode, and reports one error at a time without the
// key's column). Type mismatches are left to Node.Decode.
func strictCheck(n *yaml.Node, v any, skip []string) []strictErr {
	var errs []strictErr
	checkNode(n, reflect.TypeOf(v), skip, &errs)
	return errs
}

func checkNode(n *yaml.Node, t reflect.Type, skip []string, errs *[]strictErr) {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if n == nil || t == nil {
		return
	}
	if n.Kind == yaml.AliasNode {
		return // never followed (see configPrint); Parse refuses aliases
	}
	if t.Implements(unmarshalerType) || reflect.PointerTo(t).Implements(unmarshalerType) {
		return // the type checks itself
	}
	if t == reflect.TypeOf(yaml.Node{}) {
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			return // Node.Decode reports the type mismatch
		}
		fields := yamlFields(t)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if contains(skip, k.Value) {
				continue
			}
			ft, ok := fields[k.Value]
			if !ok {
				known := "none accepted here"
				if len(fields) > 0 {
					known = "known: " + strings.Join(sortedKeys(fields), ", ")
				}
				*errs = append(*errs, strictErr{k, fmt.Sprintf("unknown option %q (%s)", k.Value, known)})
				continue
			}
			checkNode(n.Content[i+1], ft, nil, errs)
		}
	case reflect.Slice, reflect.Array:
		if n.Kind != yaml.SequenceNode {
			return
		}
		for _, c := range n.Content {
			checkNode(c, t.Elem(), nil, errs)
		}
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			return
		}
		for i := 1; i < len(n.Content); i += 2 {
			checkNode(n.Content[i], t.Elem(), nil, errs)
		}
	}
}

var unmarshalerType = reflect.TypeOf((*yaml.Unmarshaler)(nil)).Elem()

// yamlFields returns the YAML keys of struct type t and their types. It
// is asked once per mapping checked (a 100,000-rule filter asks 100,000
// times), so the answer is kept per type; callers must not change it.
func yamlFields(t reflect.Type) map[string]reflect.Type {
	if m, ok := yamlFieldsCache.Load(t); ok {
		return m.(map[string]reflect.Type)
	}
	m, _ := yamlFieldsCache.LoadOrStore(t, yamlFieldsOf(t))
	return m.(map[string]reflect.Type)
}

// yamlFieldsCache maps a struct type to its yamlFieldsOf.
var yamlFieldsCache sync.Map

func yamlFieldsOf(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("yaml")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		if strings.Contains(opts, "inline") {
			for k, v := range yamlFields(f.Type) {
				out[k] = v
			}
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		out[name] = f.Type
	}
	return out
}

func sortedKeys(m map[string]reflect.Type) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	for i := 1; i < len(keys); i++ {
		for j := i; j > 0 && keys[j] < keys[j-1]; j-- {
			keys[j], keys[j-1] = keys[j-1], keys[j]
		}
	}
	return keys
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// cleanYAMLError strips yaml.v3's "yaml: unmarshal errors:\n  line N: "
// prefix, since our errors carry their own position.
func cleanYAMLError(err error) string {
	s := err.Error()
	s = strings.TrimPrefix(s, "yaml: unmarshal errors:\n")
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "line ") {
		if i := strings.Index(s, ": "); i > 0 {
			s = s[i+2:]
		}
	}
	return s
}

var nodePtrType = reflect.TypeOf((*yaml.Node)(nil))

// decodeNode is n.Decode(v), except that when v points to a struct, its
// *yaml.Node fields get the mapping's value nodes: yaml.v3 decodes into
// yaml.Node fields but refuses *yaml.Node ones.
func decodeNode(n *yaml.Node, v any) error {
	rv := reflect.ValueOf(v)
	if n.Kind != yaml.MappingNode || rv.Kind() != reflect.Pointer || rv.IsNil() || rv.Elem().Kind() != reflect.Struct {
		return n.Decode(v)
	}
	st := rv.Elem()
	ptrs := map[string]reflect.Value{}
	for i := 0; i < st.NumField(); i++ {
		f := st.Type().Field(i)
		if !f.IsExported() || f.Type != nodePtrType {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		if name != "-" {
			ptrs[name] = st.Field(i)
		}
	}
	if len(ptrs) == 0 {
		return n.Decode(v)
	}
	rest := *n
	rest.Content = make([]*yaml.Node, 0, len(n.Content))
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if f, ok := ptrs[k.Value]; ok {
			f.Set(reflect.ValueOf(val))
			continue
		}
		rest.Content = append(rest.Content, k, val)
	}
	return rest.Decode(v)
}
