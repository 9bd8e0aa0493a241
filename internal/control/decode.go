package control

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/warpflow/warpflow/pipelines"
)

// Body limits: a pipeline's source is the largest thing a request
// carries (MaxRequestBytes: a source of up to pipelines.MaxConfigBytes,
// the limit a pipeline file has, with room for its JSON escaping, so a
// pipeline that loads from a file loads through the API too: a 100,000-rule
// filter is about 10 MB); every other request is a few fields or nothing.
// Loads are read one at a time (Server.loading), so the bodies in memory
// at once are bounded by one large one, not by the number of clients.
const (
	MaxRequestBytes = pipelines.MaxConfigBytes + pipelines.MaxConfigBytes/4
	MaxSmallRequest = 4 << 10
)

// readBody reads a request body of at most limit bytes; over it, the
// error is ErrTooLarge (413), whether the length was announced or not.
func readBody(r *http.Request, limit int64) ([]byte, error) {
	if r.ContentLength > limit {
		return nil, Errorf(ErrTooLarge, "request body of %d bytes is over this endpoint's limit of %d bytes", r.ContentLength, limit)
	}
	// An announced length within the limit sizes the buffer (one
	// allocation, not io.ReadAll's doubling); a chunked body starts small.
	// A client that announces a large body and sends little makes the
	// daemon hold one buffer of the announced size, at most the limit:
	// the same bound a body that really is that large has, since large
	// bodies (loads) are read one at a time and the server's ReadTimeout
	// ends a stalled one.
	hint := 512
	if r.ContentLength > 0 {
		hint = int(r.ContentLength) + 1
	}
	data, err := pipelines.ReadAllSized(io.LimitReader(r.Body, limit+1), hint)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, Errorf(ErrTooLarge, "request body over %d bytes", mbe.Limit)
		}
		return nil, Errorf(ErrBadRequest, "reading the request: %s", Clip(err.Error()))
	}
	if int64(len(data)) > limit {
		return nil, Errorf(ErrTooLarge, "request body over this endpoint's limit of %d bytes", limit)
	}
	return data, nil
}

// decode reads a JSON body strictly: within limit, one object whose keys
// are exactly the fields of v (encoding/json would match "SOURCE" to
// source: the keys are checked first, case-sensitively, and a key given
// twice is refused), the right types, nothing after it.
func decode(r *http.Request, v any, limit int64) error {
	data, err := readBody(r, limit)
	if err != nil {
		return err
	}
	return decodeStrict(data, v)
}

func decodeStrict(data []byte, v any) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return Errorf(ErrBadRequest, "empty request body: want a JSON object")
	}
	names := fieldNames(reflect.TypeOf(v).Elem())
	dec := json.NewDecoder(bytes.NewReader(data))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return Errorf(ErrBadRequest, "malformed request: want a JSON object")
	}
	seen := map[string]bool{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return Errorf(ErrBadRequest, "malformed request: %s", Clip(err.Error()))
		}
		key, _ := t.(string)
		if !slices.Contains(names, key) {
			hint := ""
			for _, n := range names {
				if strings.EqualFold(n, key) {
					hint = fmt.Sprintf(": field names are case-sensitive, did you mean %q?", n)
				}
			}
			if hint == "" {
				hint = fmt.Sprintf(" (this request's fields: %s)", strings.Join(names, ", "))
			}
			return Errorf(ErrBadRequest, "malformed request: unknown field %q%s", Clip(key), hint)
		}
		if seen[key] {
			return Errorf(ErrBadRequest, "malformed request: field %q given twice", key)
		}
		seen[key] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return Errorf(ErrBadRequest, "malformed request: field %q: %s", key, Clip(err.Error()))
		}
	}
	if _, err := dec.Token(); err != nil {
		return Errorf(ErrBadRequest, "malformed request: %s", Clip(err.Error()))
	}
	if _, err := dec.Token(); err != io.EOF {
		return Errorf(ErrBadRequest, "malformed request: data after the JSON object")
	}
	// The keys are exact: now the values, into v.
	dec = json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return Errorf(ErrBadRequest, "malformed request: %s", Clip(err.Error()))
	}
	return nil
}

var fieldCache sync.Map // reflect.Type -> []string

// fieldNames are the JSON names of a flat request struct's fields (the
// request types have no nested objects: TestRequestTypesFlat holds them
// to it, since the key check looks at the top level only).
func fieldNames(t reflect.Type) []string {
	if v, ok := fieldCache.Load(t); ok {
		return v.([]string)
	}
	var names []string
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch name {
		case "-":
			continue
		case "":
			name = f.Name
		}
		names = append(names, name)
	}
	fieldCache.Store(t, names)
	return names
}

// decodeEmpty accepts an empty body or an empty JSON object, within the
// small request limit.
func decodeEmpty(r *http.Request) error {
	data, err := readBody(r, MaxSmallRequest)
	if err != nil {
		return err
	}
	if t := bytes.TrimSpace(data); len(t) != 0 && !bytes.Equal(t, []byte("{}")) {
		return Errorf(ErrBadRequest, "this request takes no body")
	}
	return nil
}

// ClipLen is how much of a client's input an error or a log line echoes.
const ClipLen = 64

// Clip cuts s to ClipLen bytes (on a rune boundary) and says how long it
// was: errors and log lines echo a short prefix of what a client sent,
// never all of it.
func Clip(s string) string { return clipN(s, ClipLen) }

func clipN(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s...(%d bytes)", s[:cut], len(s))
}

// Bounds of what an error reply and a log line carry of a message made
// from a client's input (a pipeline's problems quote its source).
const (
	maxReplyMessage  = 2048
	maxReplyProblems = 200
	maxReplyProblem  = 512
	maxLogMessage    = 512
	maxLogProblems   = 10
	maxLogProblem    = 256
)

// bounded returns e with its message and problems cut to n bytes each and
// at most max problems, the rest counted in a last line.
func bounded(e *Error, msg, max, n int) *Error {
	out := &Error{Code: e.Code, Message: clipN(e.Message, msg), Status: e.Status}
	for i, p := range e.Problems {
		if i == max {
			out.Problems = append(out.Problems, fmt.Sprintf("... and %d more problems", len(e.Problems)-max))
			break
		}
		out.Problems = append(out.Problems, clipN(p, n))
	}
	return out
}
