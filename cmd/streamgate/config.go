package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// engineConfig is everything `streamgate engine` reads from flags and env.
type engineConfig struct {
	GRPC          string
	Models        string
	ModelDir      string
	Model         string
	ModelCache    string
	ShutdownGrace time.Duration
}

func (c *engineConfig) register(fs *flag.FlagSet) {
	fs.StringVar(&c.GRPC, "grpc", "127.0.0.1:8001", "engine gRPC listen address (Triton's default port is 8001)")
	fs.StringVar(&c.Models, "models", "", "model repository in Triton's layout (<dir>/<model>/config.pbtxt); empty serves the built-in models")
	fs.StringVar(&c.ModelDir, "model-dir", "", "directory with llama2.c weights (stories260K.bin, tok512.bin; stories15M.bin, tokenizer.bin; ...), searched first; then shared/models in and above the working directory and the binary's, then the model cache")
	fs.StringVar(&c.Model, "model", "", "llama2.c models to serve: NAME[,NAME...] as 'streamgate models list' shows them, each an error when not found; empty serves stories260k and every other known model that is found")
	registerModelCache(fs, &c.ModelCache)
	fs.DurationVar(&c.ShutdownGrace, "shutdown-grace", 10*time.Second, "on SIGTERM, how long running streams may take to finish")
}

func parseEngine(args []string, stderr io.Writer) (engineConfig, error) {
	var c engineConfig
	fs := flag.NewFlagSet("engine", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c.register(fs)
	return c, parse(fs, args)
}

// parse applies STREAMGATE_<FLAG> environment variables, then args.
func parse(fs *flag.FlagSet, args []string) error {
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		env := "STREAMGATE_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		f.Usage += fmt.Sprintf(" (env %s)", env)
		if v, ok := os.LookupEnv(env); ok && err == nil {
			if e := f.Value.Set(v); e != nil {
				err = fmt.Errorf("%s=%q: %v", env, v, e)
			}
		}
	})
	if err != nil {
		return err
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	return nil
}
