package modelcache

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// GGUFName is the name a GGUF file is served under: its file name in lower
// case without ".gguf" ("Qwen2.5-0.5B-Instruct-Q8_0.gguf" is
// "qwen2.5-0.5b-instruct-q8_0"), the same wherever the file lies.
func GGUFName(path string) string {
	base := filepath.Base(path)
	if strings.HasSuffix(strings.ToLower(base), ".gguf") {
		base = base[:len(base)-len(".gguf")]
	}
	return strings.ToLower(base)
}

// FindGGUF resolves a --model argument to a GGUF file: a path ending in
// .gguf (which must exist), or the GGUFName of a .gguf file in one of
// dirs. ok is false when arg is neither (it may be a catalog name).
func FindGGUF(arg string, dirs []string) (path string, ok bool, err error) {
	if strings.HasSuffix(strings.ToLower(arg), ".gguf") {
		st, err := os.Stat(arg)
		if err != nil {
			return "", false, fmt.Errorf("GGUF file %s: %w", arg, err)
		}
		if !st.Mode().IsRegular() {
			return "", false, fmt.Errorf("GGUF file %s: not a regular file", arg)
		}
		return arg, true, nil
	}
	for _, d := range dirs {
		for _, p := range GGUFFiles(d) {
			if GGUFName(p) == strings.ToLower(arg) {
				return p, true, nil
			}
		}
	}
	return "", false, nil
}

// GGUFFiles lists the .gguf files in dir, sorted ("" or a missing
// directory: none).
func GGUFFiles(dir string) []string {
	if dir == "" {
		return nil
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		if e.Type().IsRegular() && strings.HasSuffix(strings.ToLower(e.Name()), ".gguf") {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	sort.Strings(out)
	return out
}
