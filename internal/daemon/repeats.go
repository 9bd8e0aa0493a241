package daemon

import (
	"context"
	"log/slog"
	"sort"
	"sync"
	"time"
)

// repeats rate-limits log lines that can repeat (a socket's error seen at
// every check, a netlink subscription that keeps failing): the first line
// of a key is logged at once; the same key again within every is counted,
// not logged; the first one after every has passed is logged with how
// many were held back ("repeated") and since when, and Flush logs what is
// still held back when the daemon stops (a line marked held_back). So a line repeats at most once
// per every, and no occurrence goes uncounted.
type repeats struct {
	log   *slog.Logger
	every time.Duration
	mu    sync.Mutex
	keys  map[string]*repeat
}

type repeat struct {
	level      slog.Level
	msg        string
	attrs      []any
	logged     time.Time // when a line of the key was last logged
	held       uint64    // occurrences since, not logged
	firstHeld  time.Time
	everLogged bool
}

func newRepeats(log *slog.Logger, every time.Duration) *repeats {
	return &repeats{log: log, every: every, keys: map[string]*repeat{}}
}

// Log logs msg with attrs at level now, or counts it when key was logged
// less than every ago.
func (r *repeats) Log(now time.Time, key string, level slog.Level, msg string, attrs ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := r.keys[key]
	if k == nil {
		k = &repeat{}
		r.keys[key] = k
	}
	k.level, k.msg, k.attrs = level, msg, attrs
	if k.everLogged && now.Sub(k.logged) < r.every {
		if k.held == 0 {
			k.firstHeld = now
		}
		k.held++
		return
	}
	r.emitLocked(k, now, attrs)
}

// emitLocked logs k's line with attrs and, when some were held back, how
// many ("repeated": occurrences since the last line logged, not counting
// this one) and since when.
func (r *repeats) emitLocked(k *repeat, now time.Time, attrs []any) {
	if k.held > 0 {
		attrs = append(attrs[:len(attrs):len(attrs)], "repeated", k.held, "since", k.firstHeld.UTC().Format(time.RFC3339Nano))
	}
	r.log.Log(context.Background(), k.level, k.msg, attrs...)
	k.logged, k.held, k.everLogged = now, 0, true
}

// Flush logs, for every key with occurrences held back, its last line with
// their count, marked held_back: that line is not one more occurrence.
func (r *repeats) Flush(now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	names := make([]string, 0, len(r.keys))
	for n := range r.keys {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if k := r.keys[n]; k.held > 0 {
			r.emitLocked(k, now, append(k.attrs[:len(k.attrs):len(k.attrs)], "held_back", true))
		}
	}
}
