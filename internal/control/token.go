package control

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	pathpkg "path"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/warpflow/warpflow/internal/trust"
)

// DefaultTokenFile is the TCP listener's bearer token next to the default
// socket (TokenFileFor(DefaultSocket)).
const DefaultTokenFile = "/run/warpflow/control.token"

// TokenFileFor is the token file a daemon on socket uses unless told
// otherwise: control.token in the socket's directory.
func TokenFileFor(socket string) string {
	return filepath.Join(filepath.Dir(socket), "control.token")
}

// maxTokenFile bounds a token file; minToken is the shortest token taken.
const (
	maxTokenFile = 4 << 10
	minToken     = 32
)

// ValidToken checks a token's form: at least 32 printable ASCII bytes,
// no spaces (it travels in an HTTP header).
func ValidToken(tok string) error {
	if len(tok) < minToken || len(tok) > maxTokenFile {
		return fmt.Errorf("control token: %d bytes: want %d to %d", len(tok), minToken, maxTokenFile)
	}
	for i := 0; i < len(tok); i++ {
		if tok[i] <= ' ' || tok[i] > '~' {
			return fmt.Errorf("control token: byte %d is not printable ASCII (or is a space)", i)
		}
	}
	return nil
}

// loadToken reads the token file at path, or makes it (32 random bytes,
// hex, mode 0600) when it does not exist. The file's directory is checked
// like the socket's; the file must be a regular file owned by root or us
// and readable by nobody else.
func loadToken(path string) (tok string, made bool, err error) {
	tok, err = readOrMakeToken(path, &made)
	return tok, made, err
}

func readOrMakeToken(path string, made *bool) (string, error) {
	if !filepath.IsAbs(path) {
		return "", fmt.Errorf("control token file %s: want an absolute path", path)
	}
	dir, name := filepath.Dir(path), filepath.Base(path)
	room, err := trust.OpenRoom(dir, trust.RoomOptions{Chain: trust.Chain{Owners: []int{os.Geteuid()}}, Mode: 0o750, GID: -1})
	if err != nil {
		return "", fmt.Errorf("control token file %s: %w", path, err)
	}
	defer room.Close()
	for range 2 {
		f, err := room.Open(name)
		if errors.Is(err, fs.ErrNotExist) {
			tok, err := makeToken(room, name)
			if errors.Is(err, fs.ErrExist) {
				continue // made by another process between the two: read it
			}
			*made = err == nil
			return tok, err
		}
		if err != nil {
			return "", fmt.Errorf("control token file: %w", err)
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			return "", fmt.Errorf("control token file: %w", err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		switch {
		case st.Uid != 0 && int(st.Uid) != os.Geteuid():
			return "", fmt.Errorf("control token file %s: %w: owned by uid %d, not root or us (uid %d): chown it, or remove it and a new one is made", path, trust.ErrUnsafe, st.Uid, os.Geteuid())
		case fi.Mode().Perm()&0o077 != 0:
			return "", fmt.Errorf("control token file %s: %w: mode %04o lets others read it: chmod 600 %s", path, trust.ErrUnsafe, fi.Mode().Perm(), path)
		case fi.Size() > maxTokenFile:
			return "", fmt.Errorf("control token file %s: %d bytes: want a token of at most %d", path, fi.Size(), maxTokenFile)
		}
		data, err := io.ReadAll(io.LimitReader(f, maxTokenFile+1))
		if err != nil {
			return "", fmt.Errorf("control token file %s: %w", path, err)
		}
		tok := strings.TrimSpace(string(data))
		if err := ValidToken(tok); err != nil {
			return "", fmt.Errorf("%s: %w", path, err)
		}
		return tok, nil
	}
	return "", fmt.Errorf("control token file %s: appeared and vanished while being read", path)
}

func makeToken(room *trust.Room, name string) (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("control token: %w", err)
	}
	tok := hex.EncodeToString(b[:])
	f, err := room.Create(name, 0o600)
	if err != nil {
		return "", err
	}
	if _, err := f.WriteString(tok + "\n"); err != nil {
		f.Close()
		room.Remove(name)
		return "", fmt.Errorf("control token file: %w", err)
	}
	if err := f.Close(); err != nil {
		room.Remove(name)
		return "", fmt.Errorf("control token file: %w", err)
	}
	return tok, nil
}

// tokenOK compares a presented token with ours in constant time (over
// their hashes, so the length does not show either).
func (s *Server) tokenOK(presented string) bool {
	a, b := sha256.Sum256([]byte(presented)), sha256.Sum256([]byte(s.token))
	return s.token != "" && subtle.ConstantTimeCompare(a[:], b[:]) == 1
}

// tcpAllowed is the check for a TCP request, which has no peer
// credential: a mutating request (any method but GET and HEAD, so a new
// verb is covered without a list to keep) needs the bearer token; a read
// needs it unless it comes from loopback (counters and pipeline
// definitions, the same exposure as /metrics on loopback, and no side
// effect), except a read of the flow tables (showsFlows): who talks to
// whom is not every local user's to see (Linux shows its conntrack table
// to root alone). A token that is presented must match, read or not.
func (s *Server) tcpAllowed(r *http.Request, p Peer) error {
	auth := r.Header.Values("Authorization")
	read := r.Method == http.MethodGet || r.Method == http.MethodHead
	how := "present the token in the daemon's token file (control.token_file, default " + DefaultTokenFile + ", readable by root): warpctl --token-file FILE, or $WARPCTL_TOKEN_FILE"
	switch {
	case len(auth) == 0 && read && showsFlows(r.URL.Path):
		return Errorf(ErrUnauthorized, "%s over TCP lists flows' addresses and needs the control token, from loopback too: %s", Clip(r.URL.Path), how)
	case len(auth) == 0 && read && isLoopback(p.Addr):
		return nil
	case len(auth) == 0 && read:
		return Errorf(ErrUnauthorized, "reads over TCP from %s need the control token (only loopback reads are open): %s", Clip(p.Addr), how)
	case len(auth) == 0:
		return Errorf(ErrUnauthorized, "%s %s over TCP changes the daemon and needs the control token: %s", r.Method, Clip(r.URL.Path), how)
	case len(auth) > 1:
		return Errorf(ErrUnauthorized, "more than one Authorization header")
	}
	tok, ok := strings.CutPrefix(auth[0], "Bearer ")
	if !ok {
		return Errorf(ErrUnauthorized, "Authorization: want \"Bearer TOKEN\"")
	}
	if !s.tokenOK(tok) {
		return Errorf(ErrUnauthorized, "the control token does not match the daemon's: %s", how)
	}
	return nil
}

func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// showsFlows reports whether a read of path shows flows (addresses and
// ports of live connections): the conntrack listing, under any spelling
// the mux would route there (a trailing slash, a cleaned path).
func showsFlows(path string) bool {
	return strings.HasPrefix(pathpkg.Clean("/"+path), "/v1/conntrack")
}
