package main

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// manifestFile, in an --out directory, lists the files the last replay
// wrote there (slash-separated paths relative to the directory, one a
// line), so that --force removes exactly those.
const manifestFile = ".warpctl-outputs"

// prepareOut makes dir ready for a replay's outputs. A missing or empty
// directory is fine. Otherwise the replay is refused (stale captures from an
// earlier run would sit beside the new ones and later make false goldens),
// unless force is set: then the files an earlier replay wrote (its manifest
// and what it lists) and the files this run will write (known, relative to
// dir) are removed first, with directories that leaves empty. Anything else
// in dir is never removed: it is named, and the replay refused.
func prepareOut(dir string, force bool, known []string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) || err == nil && len(entries) == 0 {
		return nil
	}
	if err != nil {
		return failf(codeFailed, "--out %s: %v", dir, err)
	}
	present, err := listFiles(dir)
	if err != nil {
		return failf(codeFailed, "--out %s: %v", dir, err)
	}
	if !force {
		return failf(codeUsage, "--out %s is not empty (%s): give a new or empty directory, or --force to replace a previous replay's outputs", dir, summary(present))
	}
	ours, err := readManifest(dir)
	if err != nil {
		return failf(codeFailed, "--out %s: %v", dir, err)
	}
	ours = append(append(ours, known...), manifestFile)
	var foreign []string
	for _, f := range present {
		if !slices.Contains(ours, f) {
			foreign = append(foreign, f)
		}
	}
	if len(foreign) > 0 {
		return failf(codeUsage, "--out %s: --force removes only what warpctl replay wrote (listed in %s), but the directory also holds %s: remove them or choose another directory", dir, manifestFile, summary(foreign))
	}
	for _, f := range present {
		if err := os.Remove(filepath.Join(dir, filepath.FromSlash(f))); err != nil {
			return failf(codeFailed, "--force: %v", err)
		}
	}
	// Remove the subdirectories emptied above, deepest first.
	var dirs []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() && p != dir {
			dirs = append(dirs, p)
		}
		return nil
	})
	slices.Reverse(dirs)
	for _, d := range dirs {
		os.Remove(d) // fails, harmlessly, unless empty
	}
	return nil
}

// listFiles returns every file under dir, relative and slash-separated.
func listFiles(dir string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			rel, err := filepath.Rel(dir, p)
			if err != nil {
				return err
			}
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	return out, err
}

func readManifest(dir string) ([]string, error) {
	f, err := os.Open(filepath.Join(dir, manifestFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); line != "" && !strings.HasPrefix(line, "#") {
			out = append(out, filepath.ToSlash(filepath.Clean(line)))
		}
	}
	return out, sc.Err()
}

// writeManifest records the files a replay wrote under dir.
func writeManifest(dir string, files []string) error {
	var b strings.Builder
	b.WriteString("# files written by warpctl replay; --force removes exactly these\n")
	for _, f := range files {
		b.WriteString(f + "\n")
	}
	if err := os.WriteFile(filepath.Join(dir, manifestFile), []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", manifestFile, err)
	}
	return nil
}

// summary names up to four files and counts the rest.
func summary(files []string) string {
	if len(files) <= 4 {
		return strings.Join(files, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(files[:4], ", "), len(files)-4)
}
