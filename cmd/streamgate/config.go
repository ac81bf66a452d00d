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
	ShutdownGrace time.Duration
}

func (c *engineConfig) register(fs *flag.FlagSet) {
	fs.StringVar(&c.GRPC, "grpc", "127.0.0.1:8001", "engine gRPC listen address (Triton's default port is 8001)")
	fs.StringVar(&c.Models, "models", "", "model repository in Triton's layout (<dir>/<model>/config.pbtxt); empty serves the built-in models")
	fs.StringVar(&c.ModelDir, "model-dir", "", "directory with llama2.c weights (stories260K.bin, tok512.bin); empty searches ./shared/models and ../shared/models")
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
