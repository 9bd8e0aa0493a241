package image

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// file is one entry of the image's root filesystem: a directory when data
// is nil and dir is set.
type file struct {
	name     string // relative, no leading slash
	mode     int64
	uid, gid int
	dir      bool
	data     []byte
}

// rootfs is the layer's tar: the binaries plus the few files and
// directories a scratch image needs, parents first, sorted, every entry
// with the same time and no user or group names.
func rootfs(mtime time.Time, bins []file) ([]byte, error) {
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nwarpflow:x:%d:%d:warpflow:/var/lib/warpflow:/sbin/nologin\n", User, User)
	group := fmt.Sprintf("root:x:0:\nwarpflow:x:%d:\n", User)
	entries := []file{
		{name: "etc", dir: true, mode: 0o755},
		{name: "etc/passwd", mode: 0o644, data: []byte(passwd)},
		{name: "etc/group", mode: 0o644, data: []byte(group)},
		{name: "etc/warpflow", dir: true, mode: 0o755},
		{name: "run", dir: true, mode: 0o755},
		{name: "run/warpflow", dir: true, mode: 0o750, uid: User, gid: User},
		{name: "tmp", dir: true, mode: 0o1777},
		{name: "usr", dir: true, mode: 0o755},
		{name: "usr/local", dir: true, mode: 0o755},
		{name: BinDir, dir: true, mode: 0o755},
		{name: "var", dir: true, mode: 0o755},
		{name: "var/lib", dir: true, mode: 0o755},
		{name: "var/lib/warpflow", dir: true, mode: 0o750, uid: User, gid: User},
	}
	entries = append(entries, bins...)
	sort.Slice(entries, func(i, j int) bool { return entries[i].name < entries[j].name })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: e.mode, Uid: e.uid, Gid: e.gid, ModTime: mtime, Format: tar.FormatPAX}
		if e.dir {
			h.Typeflag, h.Name = tar.TypeDir, e.name+"/"
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// gzipBytes compresses b at a fixed level with an empty gzip header (no
// name, no time), so the same input always gives the same bytes.
func gzipBytes(b []byte) ([]byte, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(b); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// tarDir writes the tree under dir (an OCI layout: regular files and
// directories only) to w, sorted by path, each entry owned by 0:0 with
// mode 0644 or 0755 and time mtime.
func tarDir(w io.Writer, dir string, mtime time.Time) error {
	var paths []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == dir {
			return nil
		}
		if !d.IsDir() && !d.Type().IsRegular() {
			return fmt.Errorf("%s: not a regular file or directory", p)
		}
		paths = append(paths, p)
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(paths)
	tw := tar.NewWriter(w)
	for _, p := range paths {
		rel := filepath.ToSlash(strings.TrimPrefix(p, dir+string(filepath.Separator)))
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		h := &tar.Header{Name: rel, ModTime: mtime, Format: tar.FormatPAX}
		if fi.IsDir() {
			h.Typeflag, h.Name, h.Mode = tar.TypeDir, rel+"/", 0o755
			if err := tw.WriteHeader(h); err != nil {
				return err
			}
			continue
		}
		h.Typeflag, h.Mode, h.Size = tar.TypeReg, 0o644, fi.Size()
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		_, err = io.Copy(tw, f)
		f.Close()
		if err != nil {
			return err
		}
	}
	return tw.Close()
}
