package modelcache

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Cache is a directory of pulled model files, flat: each file under its
// File.Name. Its methods may be called concurrently, but two Pulls of the
// same file at once (two processes included) corrupt its download.
type Cache struct {
	Dir string
}

// DefaultDir is the cache directory used when none is given:
// $XDG_CACHE_HOME/streamgate/models, else ~/.cache/streamgate/models.
func DefaultDir() (string, error) {
	if x := os.Getenv("XDG_CACHE_HOME"); filepath.IsAbs(x) {
		return filepath.Join(x, "streamgate", "models"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", errors.New("no cache directory: neither $XDG_CACHE_HOME nor $HOME is set; give one with --model-cache")
	}
	return filepath.Join(home, ".cache", "streamgate", "models"), nil
}

// Path is where f lives in the cache once it is complete.
func (c Cache) Path(f File) string { return filepath.Join(c.Dir, f.Name) }

func (c Cache) partPath(f File) string { return c.Path(f) + ".part" }

func (c Cache) sumPath(f File) string { return c.Path(f) + ".sha256" }

// Has reports whether every file of m is complete in the cache.
func (c Cache) Has(m Model) bool { return hasFiles(c.Dir, m) }

// Locations returns the directories searched for model files, in order:
// explicit (a --model-dir flag; "" to skip), $STREAMGATE_MODEL_DIR,
// shared/models in the working directory and in each directory above it,
// the same beside the running binary and above it (so a checkout finds the
// weights beside it from any subdirectory, and a binary built into a
// checkout finds them from anywhere), then cacheDir. Duplicates are
// dropped.
func Locations(explicit, cacheDir string) []string {
	var dirs []string
	seen := map[string]bool{}
	add := func(d string) {
		if d != "" && !seen[d] {
			seen[d] = true
			dirs = append(dirs, d)
		}
	}
	add(explicit)
	add(os.Getenv("STREAMGATE_MODEL_DIR"))
	if wd, err := os.Getwd(); err == nil {
		for _, d := range ancestors(wd) {
			add(filepath.Join(d, "shared", "models"))
		}
	}
	if exe, err := os.Executable(); err == nil && !isGoRun(exe) {
		if exe, err = filepath.EvalSymlinks(exe); err == nil {
			for _, d := range ancestors(filepath.Dir(exe)) {
				add(filepath.Join(d, "shared", "models"))
			}
		}
	}
	add(cacheDir)
	return dirs
}

// PutDir is the directory to copy model files into by hand: explicit (a
// --model-dir flag), else $STREAMGATE_MODEL_DIR, else cacheDir; each is
// searched (Locations).
func PutDir(explicit, cacheDir string) string {
	for _, d := range []string{explicit, os.Getenv("STREAMGATE_MODEL_DIR")} {
		if d != "" {
			return d
		}
	}
	return cacheDir
}

// Program is the command line that runs this program the way the user
// ran it, for advice that names a command: "go run ./cmd/streamgate"
// under go run (whose binary is deleted when it exits), "streamgate" when
// that is the binary $PATH finds, else the path it was started by
// ("./streamgate").
func Program() string {
	exe, err := os.Executable()
	if err != nil {
		return "streamgate"
	}
	if isGoRun(exe) {
		return "go run ./cmd/streamgate"
	}
	if onPath, err := exec.LookPath("streamgate"); err == nil && sameFile(onPath, exe) {
		return "streamgate"
	}
	if len(os.Args) > 0 && strings.ContainsRune(os.Args[0], filepath.Separator) {
		return os.Args[0]
	}
	return "streamgate"
}

// isGoRun says whether exe is a binary that go run built: it lives in a
// go-build directory under the temporary directory, and is gone after.
func isGoRun(exe string) bool {
	for _, part := range strings.Split(filepath.ToSlash(exe), "/") {
		if strings.HasPrefix(part, "go-build") {
			return true
		}
	}
	return false
}

func sameFile(a, b string) bool {
	sa, err1 := os.Stat(a)
	sb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(sa, sb)
}

// ancestors returns dir and every directory above it, nearest first.
func ancestors(dir string) []string {
	var out []string
	for {
		out = append(out, dir)
		up := filepath.Dir(dir)
		if up == dir {
			return out
		}
		dir = up
	}
}

// Partial returns the first of dirs that holds some but not all of m's
// files, and the names of those it lacks; "" and nil when none does.
func Partial(m Model, dirs []string) (dir string, missing []string) {
	for _, d := range dirs {
		var have int
		missing = missing[:0]
		for _, f := range m.Files() {
			if st, err := os.Stat(filepath.Join(d, f.Name)); err == nil && st.Mode().IsRegular() {
				have++
			} else {
				missing = append(missing, f.Name)
			}
		}
		if have > 0 && len(missing) > 0 {
			return d, missing
		}
	}
	return "", nil
}

// Find returns the first of dirs that holds every file of m, or "".
func Find(m Model, dirs []string) string {
	for _, d := range dirs {
		if hasFiles(d, m) {
			return d
		}
	}
	return ""
}

func hasFiles(dir string, m Model) bool {
	for _, f := range m.Files() {
		st, err := os.Stat(filepath.Join(dir, f.Name))
		if err != nil || !st.Mode().IsRegular() {
			return false
		}
	}
	return true
}
