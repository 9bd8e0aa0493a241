package main

import (
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
)

func main() {
	out := flag.String("out", "testdata/captures", "directory to write the captures into")
	flag.Parse()
	if err := run(*out); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

func run(out string) error {
	files, err := generate()
	if err != nil {
		return err
	}
	for _, name := range slices.Sorted(maps.Keys(files)) {
		path := filepath.Join(out, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return fmt.Errorf("create dir: %w", err)
		}
		if err := os.WriteFile(path, files[name], 0o644); err != nil {
			return fmt.Errorf("write capture: %w", err)
		}
	}
	return nil
}

// generate builds every output file, keyed by slash-separated path
// relative to the output directory.
func generate() (map[string][]byte, error) {
	files := map[string][]byte{}
	add := func(c *capture, manifest bool) error {
		data, err := c.encode()
		if err != nil {
			return err
		}
		files[c.name] = data
		if manifest {
			files[c.name+".txt"] = c.manifest()
		}
		return nil
	}
	mixed := buildMixed()
	if err := add(mixed, true); err != nil {
		return nil, err
	}
	if err := add(buildMalformed(), true); err != nil {
		return nil, err
	}
	if err := add(buildEncap(), true); err != nil {
		return nil, err
	}
	real, err := buildRealworld()
	if err != nil {
		return nil, err
	}
	for k, v := range real {
		files[k] = v
	}
	for _, tcp := range []bool{false, true} {
		if err := add(buildBench(tcp), false); err != nil {
			return nil, err
		}
	}
	lts, shared := buildLinktypes()
	if shared.err != nil {
		return nil, shared.err
	}
	files["linktypes/packets.txt"] = shared.manifest()
	for _, c := range lts {
		if err := add(c, false); err != nil {
			return nil, err
		}
	}
	// Any frame of 100+ bytes will do for bad/; take the first such one.
	var frame []byte
	for _, r := range mixed.recs {
		if len(r.data) >= 100 {
			frame = r.data
			break
		}
	}
	bad, err := buildBad(frame)
	if err != nil {
		return nil, err
	}
	for k, v := range bad {
		files[k] = v
	}
	return files, nil
}
