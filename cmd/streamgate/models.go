package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/streamgate/streamgate/cmd/internal/cli"
	"github.com/streamgate/streamgate/cmd/internal/modelcache"
	"github.com/streamgate/streamgate/cmd/internal/stack"
)

// modelsCommand is `streamgate models`: it lists the llama2.c models
// streamgate knows and pulls them into the model cache, where serve finds
// them.
func modelsCommand() *cli.Command {
	return &cli.Command{
		Name:    "models",
		Purpose: "list and pull llama2.c models (stories15M, ...) that serve loads",
		About: `Each model is served under its name in lower case (stories15M as
"stories15m"), with the raw chat template: chat messages become the prompt
as they are, since these are story models, not chat models.`,
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
		fmt.Fprintf(stdout, "%s is ready: serve it with '%s serve --model %s' (model %q)\n", m.Name, modelcache.Program(), m.Name, m.ID)
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
	if _, err := fmt.Fprintf(w, "\nmodel cache: %s\n", cache); err != nil || len(absent) == 0 {
		return err
	}
	_, err := fmt.Fprintf(w, "offline, copy a model's files into %s:\n  %s\n", putDir, strings.Join(absent, "\n  "))
	return err
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
