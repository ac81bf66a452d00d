package stack

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/streamgate/streamgate/cmd/internal/cli"
	"github.com/streamgate/streamgate/cmd/internal/modelcache"
	"github.com/streamgate/streamgate/engine/llama2"
	"github.com/streamgate/streamgate/gateway/openai"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
)

// TextModels returns the llama2.c text models to serve, each under its
// catalog ID (stories260k, stories15m, ...) from the first directory of
// modelcache.Locations that holds its files:
//   - with --model NAME[,NAME...], exactly those, and one not found is an
//     error naming the command that pulls it;
//   - without, the built-in stories260k and every other known model that is
//     found. stories260k not found is a warning that says where it looked;
//     no model but stories260k found logs the command that pulls a real one.
func TextModels(cfg EngineFlags, log *slog.Logger) ([]*pb.ModelConfig, error) {
	cache, err := ModelCacheDir(cfg.ModelCache)
	if err != nil {
		return nil, err
	}
	dirs := modelcache.Locations(cfg.ModelDir, cache)
	want := modelcache.Catalog()
	var (
		out    []*pb.ModelConfig
		served = map[string]bool{}
		pulled bool // a model other than the built-in one is served
	)
	addGGUF := func(path string) error {
		name := modelcache.GGUFName(path)
		if served[name] {
			return nil
		}
		c, err := llama2.GGUFConfig(name, path)
		if err != nil {
			return fmt.Errorf("--model %s: %w", path, err)
		}
		c.Parameters["max_context"] = &pb.ModelParameter{StringValue: strconv.Itoa(cfg.MaxContext)}
		c.Parameters["kv_cache_mb"] = &pb.ModelParameter{StringValue: strconv.Itoa(cfg.KVCacheMB)}
		c.Parameters["no_mmap"] = &pb.ModelParameter{StringValue: strconv.FormatBool(cfg.NoMmap)}
		log.Info(name+" GGUF model found", "path", path)
		served[name], pulled = true, true
		out = append(out, c)
		return nil
	}
	if cfg.Model != "" {
		want = nil
		for _, name := range strings.Split(cfg.Model, ",") {
			name = strings.TrimSpace(name)
			if path, ok, err := modelcache.FindGGUF(name, dirs); err != nil {
				return nil, fmt.Errorf("--model: %v", err)
			} else if ok {
				if err := addGGUF(path); err != nil {
					return nil, err
				}
				continue
			}
			m, err := modelcache.Lookup(name)
			if err != nil {
				return nil, fmt.Errorf("--model: %v", err)
			}
			want = append(want, m)
		}
	} else {
		for _, path := range modelcache.GGUFFiles(cache) {
			if err := addGGUF(path); err != nil {
				log.Warn("GGUF model not served", "error", err)
			}
		}
	}
	for _, m := range want {
		if served[m.ID] {
			continue
		}
		dir := modelcache.Find(m, dirs)
		switch {
		case dir == "" && cfg.Model != "":
			return nil, fmt.Errorf("model %s: %s; looked in %s", m.Name, notFound(m, dirs, cfg.ModelDir, cache), strings.Join(dirs, ", "))
		case dir == "" && m.Name == modelcache.BuiltIn:
			log.Warn(m.ID+" not loaded: "+notFound(m, dirs, cfg.ModelDir, cache), "looked_in", dirs)
			continue
		case dir == "":
			continue
		}
		log.Info(m.ID+" weights found", "dir", dir)
		served[m.ID] = true
		pulled = pulled || m.Name != modelcache.BuiltIn
		out = append(out, llama2.Config(m.ID, filepath.Join(dir, m.Checkpoint.Name), filepath.Join(dir, m.Tokenizer.Name)))
	}
	if !pulled && cfg.Model == "" {
		s, _ := modelcache.Lookup(modelcache.Suggested)
		log.Info("for a larger model, run: " + s.PullCommand() + " (then start again)")
	}
	return out, nil
}

// notFound says which of m's files were not found in dirs and how to get
// them (modelcache.Model.Advice), copied by hand into modelDir (the
// --model-dir flag) or cache.
func notFound(m modelcache.Model, dirs []string, modelDir, cache string) string {
	what := m.FileNames() + " not found"
	if dir, missing := modelcache.Partial(m, dirs); dir != "" {
		what = strings.Join(missing, " and ") + " not found beside the rest in " + dir
	}
	return what + "; " + m.Advice(modelcache.PutDir(modelDir, cache))
}

// RegisterModelCache adds the --model-cache flag to fs, and declares
// XDG_CACHE_HOME, where its default is.
func RegisterModelCache(fs *cli.FlagSet, p *string) {
	fs.StringVar(p, "model-cache", "", "`directory` 'streamgate models pull' downloads into, searched for models last; empty means $XDG_CACHE_HOME/streamgate/models, else ~/.cache/streamgate/models")
	fs.Env("XDG_CACHE_HOME", "where the default --model-cache is (an absolute path; unset or relative: ~/.cache)")
}

// ModelCacheDir is --model-cache, or the default cache directory.
func ModelCacheDir(flag string) (string, error) {
	if flag != "" {
		return flag, nil
	}
	return modelcache.DefaultDir()
}

// ChatTemplates gives every known llama2.c model the raw template: they are
// TinyStories story models, not chat models, so chat messages become their
// prompt as they are.
func ChatTemplates() map[string]string {
	t := map[string]string{}
	for _, m := range modelcache.Catalog() {
		t[m.ID] = openai.RawTemplate
	}
	return t
}

// UnloadedModels tells the gateway how to get each known model whose
// weights the engine did not find, instead of "does not exist".
func UnloadedModels() map[string]string {
	h := map[string]string{}
	for _, m := range modelcache.Catalog() {
		h[m.ID] = "its files " + m.FileNames() + " were not found when the engine started. Get them with '" + m.PullCommand() + "', then restart '" + modelcache.Program() + " serve'"
	}
	return h
}
