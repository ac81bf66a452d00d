package modelcache

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/streamgate/streamgate/engine/llama2"
)

func TestCatalog(t *testing.T) {
	ids := map[string]bool{}
	for _, m := range Catalog() {
		if m.ID != strings.ToLower(m.Name) || ids[m.ID] {
			t.Errorf("%s: ID %q is not its unique lower-case name", m.Name, m.ID)
		}
		ids[m.ID] = true
		if !strings.HasPrefix(m.Checkpoint.URL, "https://huggingface.co/karpathy/tinyllamas/resolve/main/") ||
			!strings.HasSuffix(m.Checkpoint.URL, "/"+m.Checkpoint.Name) || m.Checkpoint.Name != m.Name+".bin" {
			t.Errorf("%s: checkpoint %+v", m.Name, m.Checkpoint)
		}
		for _, f := range m.Files() {
			if f.SHA256 != "" && !isSHA256(f.SHA256) {
				t.Errorf("%s: pinned hash %q", f.Name, f.SHA256)
			}
		}
		if m.About == "" || m.Size == "" {
			t.Errorf("%s: no description or size", m.Name)
		}
	}
	// The built-in model's files are the ones the engine looks for.
	b, err := Lookup(BuiltIn)
	if err != nil || b.Checkpoint.Name != llama2.CheckpointFile || b.Tokenizer.Name != llama2.TokenizerFile {
		t.Errorf("built-in %+v %v", b, err)
	}
	// Three files have hashes pinned in the catalog.
	pinned := 0
	seen := map[string]bool{}
	for _, m := range Catalog() {
		for _, f := range m.Files() {
			if f.SHA256 != "" && !seen[f.Name] {
				seen[f.Name] = true
				pinned++
			}
		}
	}
	if pinned != 3 {
		t.Errorf("%d pinned files, want 3", pinned)
	}
}

func TestLookup(t *testing.T) {
	for _, name := range []string{"stories15M", "stories15m", "STORIES15M"} {
		if m, err := Lookup(name); err != nil || m.Name != "stories15M" {
			t.Errorf("Lookup(%q) = %v, %v", name, m.Name, err)
		}
	}
	_, err := Lookup("stories7B")
	if err == nil || err.Error() != `unknown model "stories7B": known models are stories260K, stories15M, stories42M, stories110M` {
		t.Errorf("Lookup of an unknown model: %v", err)
	}
}

func TestDefaultDir(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", "/x/cache")
	if d, err := DefaultDir(); err != nil || d != filepath.FromSlash("/x/cache/streamgate/models") {
		t.Errorf("with XDG_CACHE_HOME: %q %v", d, err)
	}
	t.Setenv("XDG_CACHE_HOME", "relative") // the XDG spec says to ignore it
	t.Setenv("HOME", "/home/u")
	if d, err := DefaultDir(); err != nil || d != filepath.FromSlash("/home/u/.cache/streamgate/models") {
		t.Errorf("without XDG_CACHE_HOME: %q %v", d, err)
	}
}

func TestLocationsAndFind(t *testing.T) {
	// A checkout with the weights beside it, entered from a subdirectory.
	root := t.TempDir()
	shared := filepath.Join(root, "shared", "models")
	sub := filepath.Join(root, "checkout", "cmd", "streamgate")
	cache := filepath.Join(root, "cache")
	for _, d := range []string{shared, sub, cache} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Chdir(sub)
	t.Setenv("STREAMGATE_MODEL_DIR", filepath.Join(root, "env"))
	dirs := Locations(filepath.Join(root, "flag"), cache)
	want := []string{filepath.Join(root, "flag"), filepath.Join(root, "env"),
		filepath.Join(sub, "shared", "models"), filepath.Join(root, "checkout", "cmd", "shared", "models"),
		filepath.Join(root, "checkout", "shared", "models"), shared}
	if len(dirs) < len(want)+1 || !slices.Equal(dirs[:len(want)], want) || dirs[len(dirs)-1] != cache {
		t.Fatalf("Locations:\n%s\nwant it to start with\n%s\nand end with %s", strings.Join(dirs, "\n"), strings.Join(want, "\n"), cache)
	}
	if n := len(slices.Compact(slices.Sorted(slices.Values(dirs)))); n != len(dirs) {
		t.Errorf("Locations has duplicates: %v", dirs)
	}

	m, _ := Lookup(BuiltIn)
	if d := Find(m, dirs); d != "" {
		t.Fatalf("Find in empty directories = %q", d)
	}
	write := func(dir string, f File) {
		if err := os.WriteFile(filepath.Join(dir, f.Name), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(cache, m.Checkpoint)
	write(cache, m.Tokenizer)
	if d := Find(m, dirs); d != cache {
		t.Errorf("Find = %q, want the cache %q", d, cache)
	}
	write(shared, m.Checkpoint)
	if d := Find(m, dirs); d != cache {
		t.Errorf("Find with half a model beside the checkout = %q, want the cache", d)
	}
	write(shared, m.Tokenizer)
	if d := Find(m, dirs); d != shared {
		t.Errorf("Find = %q, want %q beside the checkout", d, shared)
	}
}

func TestFromHub(t *testing.T) {
	m, _ := Lookup("stories15M")
	got := m.FromHub("http://127.0.0.1:9/mirror/")
	if got.Checkpoint.URL != "http://127.0.0.1:9/mirror/karpathy/tinyllamas/resolve/main/stories15M.bin" ||
		got.Tokenizer.URL != m.Tokenizer.URL || m.Checkpoint.URL == got.Checkpoint.URL {
		t.Errorf("FromHub: %+v", got)
	}
	if m.FromHub("") != m {
		t.Error("FromHub(\"\") changed the model")
	}
}

// A binary that go test or go run built lives in a go-build directory
// that is gone once it exits: it is no place to look for weights, and
// advice names the command that works again.
func TestGoRunBinary(t *testing.T) {
	t.Setenv("STREAMGATE_MODEL_DIR", "")
	for _, d := range Locations("", "cache") {
		if strings.Contains(d, "go-build") {
			t.Errorf("Locations has Go's build directory %s", d)
		}
	}
	if got := Program(); got != "go run ./cmd/streamgate" {
		t.Errorf("Program() = %q under go test", got)
	}
	m, _ := Lookup("STORIES260k")
	if got := m.Advice("/w"); !strings.Contains(got, "'go run ./cmd/streamgate models pull stories260K', or offline copy stories260K.bin and tok512.bin (from https://") || !strings.HasSuffix(got, "tok512.bin) into /w") {
		t.Errorf("Advice: %s", got)
	}
}
