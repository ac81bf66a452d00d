package modelcache

import (
	"fmt"
	"strings"
)

// File is one file of a model: its name in the cache, where it is fetched
// from and the hash it must have.
type File struct {
	// Name is the file's name in the cache directory, e.g. "stories15M.bin".
	Name string
	// URL is where Pull fetches it.
	URL string
	// SHA256 is the pinned hex digest of the content. Empty means Pull
	// checks the file against the SHA-256 the server publishes for URL.
	SHA256 string
}

// Model is a known llama2.c checkpoint with the tokenizer it needs.
type Model struct {
	// Name is what `streamgate models pull` and `serve --model` take, e.g.
	// "stories15M" (matched without regard to case).
	Name string
	// ID is the name the model is served under: the OpenAI "model" and
	// the Triton model name, e.g. "stories15m".
	ID string
	// About is a one-line description for `streamgate models list`.
	About string
	// Size is the approximate download size, for `streamgate models list`.
	Size string

	Checkpoint File
	Tokenizer  File
}

// Files returns the model's checkpoint and tokenizer, in that order (a
// GGUF model has only the checkpoint: its tokenizer is inside it).
func (m Model) Files() []File {
	if m.Tokenizer.Name == "" {
		return []File{m.Checkpoint}
	}
	return []File{m.Checkpoint, m.Tokenizer}
}

// PullCommand is the command that downloads m into the default cache, as
// the user runs this program (Program).
func (m Model) PullCommand() string { return Program() + " models pull " + m.Name }

// FileNames are the names of m's files, "a.bin and b.bin".
func (m Model) FileNames() string { return m.Checkpoint.Name + " and " + m.Tokenizer.Name }

// Advice says how to get m's files: the command that pulls them and,
// for a machine without the internet, which files to copy into dir (where
// serve looks for them) and where to download them from elsewhere.
func (m Model) Advice(dir string) string {
	return fmt.Sprintf("get them with '%s', or offline copy %s (from %s and %s) into %s",
		m.PullCommand(), m.FileNames(), m.Checkpoint.URL, m.Tokenizer.URL, dir)
}

// BuiltIn is the model serve loads by default, the smallest: a fresh
// checkout serves it once its weights are found (they are not in the
// repository).
const BuiltIn = "stories260K"

// Suggested is the model the log recommends to a user who has no real one.
const Suggested = "stories15M"

// DefaultHub is the Hugging Face Hub, where the checkpoints are.
const DefaultHub = "https://huggingface.co"

const (
	tinyllamas = DefaultHub + "/karpathy/tinyllamas/resolve/main/"
	// The Llama 2 32k vocabulary in llama2.c's format is not on the Hub
	// beside the checkpoints: it is a file of the llama2.c repository.
	llama2c = "https://raw.githubusercontent.com/karpathy/llama2.c/master/"
)

// Catalog returns the models Pull knows, smallest first. Each call returns
// a new slice.
func Catalog() []Model {
	tok32k := File{Name: "tokenizer.bin", URL: llama2c + "tokenizer.bin",
		SHA256: "50a52ef822ee9e83de5ce9d0be0a025a773d019437f58b5ff9dcafb063ece361"}
	story := func(name, id, about, size string) Model {
		return Model{Name: name, ID: id, About: about, Size: size,
			Checkpoint: File{Name: name + ".bin", URL: tinyllamas + name + ".bin"},
			Tokenizer:  tok32k}
	}
	return []Model{
		{
			Name: "stories260K", ID: "stories260k", Size: "1.1 MB",
			About: "TinyStories, 260K parameters, 512-token vocabulary (served by default when found)",
			Checkpoint: File{Name: "stories260K.bin", URL: tinyllamas + "stories260K/stories260K.bin",
				SHA256: "b0a507e7ad0f626624f17112325e66691f9076d622e1d3274d103d00299f2696"},
			Tokenizer: File{Name: "tok512.bin", URL: tinyllamas + "stories260K/tok512.bin",
				SHA256: "037cb335abb25d1fa9e8ecae30ed2a3a8ace9302862ebcdc05d51a6bbb10c312"},
		},
		story("stories15M", "stories15m", "TinyStories, 15M parameters, Llama 2 32k vocabulary", "61 MB"),
		story("stories42M", "stories42m", "TinyStories, 42M parameters, Llama 2 32k vocabulary", "167 MB"),
		story("stories110M", "stories110m", "TinyStories, 110M parameters, Llama 2 32k vocabulary", "438 MB"),
	}
}

// FromHub returns m with the files it fetches from DefaultHub fetched from
// hub instead (a mirror of the Hub, or a test server). "" keeps DefaultHub.
func (m Model) FromHub(hub string) Model {
	if hub == "" {
		return m
	}
	for _, f := range []*File{&m.Checkpoint, &m.Tokenizer} {
		if rest, ok := strings.CutPrefix(f.URL, DefaultHub+"/"); ok {
			f.URL = strings.TrimSuffix(hub, "/") + "/" + rest
		}
	}
	return m
}

// Lookup returns the catalog model named name (its Name or ID, in any
// case). The error lists the known names.
func Lookup(name string) (Model, error) {
	var names []string
	for _, m := range Catalog() {
		if strings.EqualFold(name, m.Name) {
			return m, nil
		}
		names = append(names, m.Name)
	}
	return Model{}, fmt.Errorf("unknown model %q: known models are %s", name, strings.Join(names, ", "))
}
