package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/streamgate/streamgate/cmd/internal/modelcache"
	"github.com/streamgate/streamgate/cmd/internal/stack"
)

// The models command lists the llama2.c models streamgate knows and pulls
// them into the model cache, where serve finds them.

const modelsUsage = `usage: streamgate models <command> [flags] [NAME...]

commands:
  list          the known llama2.c models, and where serve would load each from
  pull NAME...  download models into the cache: progress on stderr, resumed
                after an interruption, SHA-256 checked before use

Each model is served under its name in lower case (stories15M as
"stories15m"), with the raw chat template: chat messages become the prompt
as they are, since these are story models, not chat models.

examples:
  streamgate models pull stories15M && streamgate serve --model stories15M
  streamgate models list
  HF_ENDPOINT=https://hf-mirror.com streamgate models pull stories42M
`

func runModels(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, modelsUsage)
		return errors.New("models: no command given")
	}
	fs := flag.NewFlagSet("models "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, modelsUsage+"\nflags:\n")
		fs.PrintDefaults()
	}
	var cacheFlag, modelDir, hub string
	stack.RegisterModelCache(fs, &cacheFlag)
	switch args[0] {
	case "list":
		fs.StringVar(&modelDir, "model-dir", "", "directory searched first, as serve's --model-dir")
		if err := stack.ParseFlagSet(fs, args[1:]); err != nil {
			return err
		}
		cache, err := stack.ModelCacheDir(cacheFlag)
		if err != nil {
			return err
		}
		return listModels(stdout, modelcache.Locations(modelDir, cache), cache)
	case "pull":
		fs.StringVar(&hub, "hub", "", "Hugging Face Hub (or mirror) to download the checkpoints from; empty means $HF_ENDPOINT, else "+modelcache.DefaultHub)
		names, err := parseNames(fs, args[1:])
		if err != nil {
			return err
		}
		cache, err := stack.ModelCacheDir(cacheFlag)
		if err != nil {
			return err
		}
		if hub == "" {
			hub = os.Getenv("HF_ENDPOINT")
		}
		return pullModels(ctx, names, modelcache.Cache{Dir: cache}, hub, stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stderr, modelsUsage)
		return nil
	}
	fmt.Fprint(stderr, modelsUsage)
	return fmt.Errorf("models: unknown command %q", args[0])
}

// parseNames parses flags given before, between or after the names, and
// returns the names.
func parseNames(fs *flag.FlagSet, args []string) ([]string, error) {
	if err := stack.ParseFlagSet(fs, nil); err != nil { // the environment
		return nil, err
	}
	var names []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return names, nil
		}
		names = append(names, fs.Arg(0))
		args = fs.Args()[1:]
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
		fmt.Fprintf(stdout, "%s is ready: serve it with 'streamgate serve --model %s' (model %q)\n", m.Name, m.Name, m.ID)
	}
	return nil
}

func listModels(w io.Writer, dirs []string, cache string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSERVED AS\tDOWNLOAD\tFOUND IN\tABOUT")
	for _, m := range modelcache.Catalog() {
		where := modelcache.Find(m, dirs)
		if where == "" {
			where = "not found: " + m.PullCommand()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", m.Name, m.ID, m.Size, where, m.About)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\nmodel cache: %s\n", cache)
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
