package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/streamgate/streamgate/cmd/internal/cli"
	"github.com/streamgate/streamgate/cmd/internal/modelcache"
	"github.com/streamgate/streamgate/cmd/internal/stack"
	"github.com/streamgate/streamgate/engine/llama2"
)

// modelsCommand is `streamgate models`: it lists the llama2.c models
// streamgate knows and pulls them into the model cache, where serve finds
// them.
func modelsCommand() *cli.Command {
	return &cli.Command{
		Name:    "models",
		Purpose: "list and pull models that serve loads: llama2.c story models (stories15M, ...) and GGUF files from Hugging Face",
		About: `Each model is served under its name in lower case (stories15M as
"stories15m"), with the raw chat template: chat messages become the prompt
as they are, since these are story models, not chat models. A GGUF file is
served under its file name in lower case without .gguf, with the chat
template it carries.`,
		Examples: []cli.Example{
			{Comment: "Download a real 15M-parameter model, then serve it", Line: "streamgate models pull stories15M && streamgate serve --model stories15M"},
			{Comment: "What serve would load, and from where", Line: "streamgate models list"},
		},
		Commands: []*cli.Command{{
			Name:    "list",
			Purpose: "the known llama2.c models, and where serve would load each from",
			Examples: []cli.Example{
				{Line: "streamgate models list"},
				{Comment: "As serve --model-dir ./weights would see them", Line: "streamgate models list --model-dir ./weights"},
			},
			Setup: func(fs *cli.FlagSet) cli.Run {
				var cacheFlag, modelDir string
				fs.Group("Models")
				stack.RegisterModelCache(fs, &cacheFlag)
				fs.StringVar(&modelDir, "model-dir", "", "`directory` searched first, as serve's --model-dir")
				return func(_ context.Context, _ []string, stdout, _ io.Writer) error {
					cache, err := stack.ModelCacheDir(cacheFlag)
					if err != nil {
						return err
					}
					return listModels(stdout, modelcache.Locations(modelDir, cache), cache, modelcache.PutDir(modelDir, cache))
				}
			},
		}, {
			Name:    "pull",
			Purpose: "download models into the cache: progress on stderr, resumed after an interruption, SHA-256 checked before use",
			Args:    "NAME...",
			Examples: []cli.Example{
				{Line: "streamgate models pull stories15M"},
				{Comment: "A GGUF chat model from Hugging Face (served as qwen2.5-0.5b-instruct-q8_0)", Line: "streamgate models pull Qwen/Qwen2.5-0.5B-Instruct-GGUF:q8_0"},
				{Comment: "The same file by the link on its Hugging Face page", Line: "streamgate models pull https://huggingface.co/Qwen/Qwen2.5-0.5B-Instruct-GGUF/blob/main/qwen2.5-0.5b-instruct-q8_0.gguf"},
				{Comment: "Two models into a cache of your choice (serve needs the same --model-cache)", Line: "streamgate models pull --model-cache /srv/streamgate/models stories42M stories110M"},
				{Comment: "From a Hugging Face mirror", Line: "HF_ENDPOINT=https://hf-mirror.com streamgate models pull stories42M"},
			},
			Setup: func(fs *cli.FlagSet) cli.Run {
				var cacheFlag, hub string
				fs.Group("Models")
				stack.RegisterModelCache(fs, &cacheFlag)
				fs.StringVar(&hub, "hub", "", "Hugging Face Hub (or mirror) `URL` to download the checkpoints from; empty means $HF_ENDPOINT, else "+modelcache.DefaultHub)
				fs.Env("HF_ENDPOINT", "the Hugging Face Hub (or mirror) to download from when --hub is empty")
				return func(ctx context.Context, names []string, stdout, stderr io.Writer) error {
					cache, err := stack.ModelCacheDir(cacheFlag)
					if err != nil {
						return err
					}
					if hub == "" {
						hub = os.Getenv("HF_ENDPOINT")
					}
					return pullModels(ctx, names, modelcache.Cache{Dir: cache}, hub, stdout, stderr)
				}
			},
		}},
	}
}

func pullModels(ctx context.Context, names []string, cache modelcache.Cache, hub string, stdout, stderr io.Writer) error {
	if len(names) == 0 {
		return errors.New("models pull: name the models to pull (see 'streamgate models list')")
	}
	var models []modelcache.Model
	for _, name := range names {
		if modelcache.IsGGUFSpec(name) {
			m, err := modelcache.ResolveGGUF(ctx, &http.Client{Timeout: 30 * time.Second}, hub, name)
			if err != nil {
				return err
			}
			models = append(models, m)
			continue
		}
		m, err := modelcache.Lookup(name)
		if err != nil {
			return err
		}
		models = append(models, m.FromHub(hub))
	}
	opts := &modelcache.Options{Progress: stderr, Terminal: isTerminal(stderr)}
	for _, m := range models {
		fmt.Fprintf(stderr, "pulling %s into %s\n", m.Name, cache.Dir)
		if err := cache.Pull(ctx, m, opts); err != nil {
			return err
		}
		serveAs := m.Name
		if modelcache.IsGGUFSpec(m.Name) {
			serveAs = m.ID
		}
		fmt.Fprintf(stdout, "%s is ready: serve it with '%s serve --model %s' (model %q)\n", m.Name, modelcache.Program(), serveAs, m.ID)
	}
	return nil
}

// listModels writes the catalog as a table: each model, where it was
// found in dirs or which file is missing, then how to get the missing
// ones by hand into putDir.
func listModels(w io.Writer, dirs []string, cache, putDir string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSERVED AS\tDOWNLOAD\tFOUND IN\tABOUT")
	var absent []string
	for _, m := range modelcache.Catalog() {
		where := modelcache.Find(m, dirs)
		if where == "" {
			where = "not found: " + m.PullCommand()
			if dir, missing := modelcache.Partial(m, dirs); dir != "" {
				where = "missing " + strings.Join(missing, ", ") + " in " + dir + ": " + m.PullCommand()
			}
			absent = append(absent, m.Name+": "+m.FileNames())
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", m.Name, m.ID, m.Size, where, m.About)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var rows []string
	seen := map[string]bool{}
	for _, d := range dirs {
		for _, p := range modelcache.GGUFFiles(d) {
			name := modelcache.GGUFName(p)
			if seen[name] {
				continue
			}
			seen[name] = true
			in, err := llama2.Describe(p)
			if err != nil {
				rows = append(rows, fmt.Sprintf("%s\t-\t-\t-\t-\t-\t%s (unreadable: %v)", name, p, err))
				continue
			}
			rows = append(rows, fmt.Sprintf("%s\t%s\t%s\t%s\t%d\t%s\t%s", name, in.Arch, in.Quantization, in.ParamsString(), in.Context, formatMB(in.Size), p))
		}
	}
	if len(rows) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "GGUF MODEL\tARCH\tQUANT\tPARAMS\tCONTEXT\tSIZE\tFILE")
		for _, r := range rows {
			fmt.Fprintln(tw, r)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if _, err := fmt.Fprintf(w, "\nmodel cache: %s\nGGUF files from Hugging Face: %s models pull OWNER/REPO:QUANT (e.g. Qwen/Qwen2.5-0.5B-Instruct-GGUF:q8_0)\n", cache, modelcache.Program()); err != nil || len(absent) == 0 {
		return err
	}
	_, err := fmt.Fprintf(w, "offline, copy a model's files into %s:\n  %s\n", putDir, strings.Join(absent, "\n  "))
	return err
}

func formatMB(n int64) string {
	if n >= 1<<30 {
		return fmt.Sprintf("%.1f GB", float64(n)/(1<<30))
	}
	if n >= 10<<20 {
		return fmt.Sprintf("%.0f MB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%.1f MB", float64(n)/(1<<20))
}

// isTerminal reports whether w is a terminal (a character device), where a
// progress bar may redraw itself.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
