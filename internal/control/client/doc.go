// Package client is the typed Go client of warpflowd's control API
// (package control): one method per endpoint, replies decoded into the
// control package's types, errors returned as *control.Error so callers
// can match them with errors.Is (control.ErrNotFound, ...).
package client
