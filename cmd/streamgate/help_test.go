package main

import (
	"bytes"
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/streamgate/streamgate/cmd/internal/cli"
)

// The help of every command, and what a mistyped command line gets, from
// the real binary: the exit status, and what goes to stdout and stderr.
func TestHelp(t *testing.T) {
	bin := buildBinary(t)
	for _, tc := range []struct {
		args   []string
		code   int
		stdout []string // each in stdout, in order; none: stdout empty
		stderr []string // each in stderr, in order; none: stderr empty
	}{
		{args: nil, code: 2, stderr: []string{"streamgate: a streaming gateway", "Usage:\n  streamgate <command> [flags]\n", "\n  serve ", "\n  help ", "Examples:\n", "streamgate: no command given\n"}},
		{args: []string{"help"}, stdout: []string{"streamgate: a streaming gateway", "Commands:\n", "  engine ", "  bench ", "Examples:\n  # ", "\n  streamgate serve\n"}},
		{args: []string{"--help"}, stdout: []string{"streamgate: a streaming gateway", "Commands:\n"}},
		{args: []string{"help", "serve"}, stdout: []string{"streamgate serve: engine and gateway in one process", "Usage:\n  streamgate serve [flags]\n", "Examples:\n  # ",
			"\nListen addresses:\n  --grpc address\n", "default \"127.0.0.1:8001\"; env STREAMGATE_GRPC\n", "  --http address\n",
			"\nLogs:\n  --log-flush duration\n", "\nTelemetry (OpenTelemetry):\n  OTEL_EXPORTER_OTLP_ENDPOINT\n", "'streamgate help config'"}},
		{args: []string{"serve", "--help"}, stdout: []string{"streamgate serve: engine and gateway in one process", "Listen addresses:"}},
		{args: []string{"gateway", "-h"}, stdout: []string{"streamgate gateway: ", "\nUpstream:\n", "  --upstream targets\n", "\nUpstream TLS:\n  --upstream-ca file\n"}},
		{args: []string{"engine", "--grpc", "127.0.0.1:1", "--help"}, stdout: []string{"streamgate engine: ", "  --metrics address\n"}},
		{args: []string{"help", "models"}, stdout: []string{"streamgate models: ", "Usage:\n  streamgate models <command> [flags]\n", "Commands:\n  list ", "\n  pull ", "Run 'streamgate models <command> --help'"}},
		{args: []string{"models", "pull", "--help"}, stdout: []string{"streamgate models pull: download models", "Usage:\n  streamgate models pull [flags] NAME...\n", "Examples:\n", "\nModels:\n", "  --hub URL\n", "  HF_ENDPOINT\n"}},
		{args: []string{"help", "models", "list"}, stdout: []string{"streamgate models list: ", "  --model-dir directory\n"}},
		{args: []string{"bench", "--help"}, stdout: []string{"streamgate bench: load generator", "Examples:\n", "\nScenario:\n", "  --preset string\n", "\nLoad:\n", "  --c int\n"}},
		{args: []string{"help", "config"}, stdout: []string{"Every flag and environment variable", "streamgate serve, engine, gateway, models, keys\n", "[serve, engine]", "streamgate bench\n"}},

		{args: []string{"serv"}, code: 2, stderr: []string{"streamgate: unknown command \"serv\"; did you mean serve?\n", "Run 'streamgate help' for the commands.\n"}},
		{args: []string{"modles", "list"}, code: 2, stderr: []string{"streamgate: unknown command \"modles\"; did you mean models?\n"}},
		{args: []string{"models", "lsit"}, code: 2, stderr: []string{"streamgate models: unknown command \"lsit\"; did you mean list?\n", "Run 'streamgate help models' for the commands.\n"}},
		{args: []string{"models"}, code: 2, stderr: []string{"streamgate models: list and pull", "Commands:\n", "streamgate models: no command given\n"}},
		{args: []string{"help", "gatway"}, code: 2, stderr: []string{"streamgate: unknown command \"gatway\"; did you mean gateway?\n"}},
		{args: []string{"help", "confg"}, code: 2, stderr: []string{"did you mean config?\n"}},
		{args: []string{"frobnicate"}, code: 2, stderr: []string{"streamgate: unknown command \"frobnicate\"\n", "Run 'streamgate help' for the commands.\n"}},
		{args: []string{"gateway", "--upstream-stream", "8"}, code: 2, stderr: []string{"streamgate gateway: unknown flag --upstream-stream; did you mean --upstream-streams?\n", "Run 'streamgate gateway --help' for its flags.\n"}},
		{args: []string{"serve", "--ws_max_in_flight", "8"}, code: 2, stderr: []string{"streamgate serve: unknown flag --ws_max_in_flight; did you mean --ws-max-in-flight?\n"}},
		{args: []string{"serve", "-grcp", ":1"}, code: 2, stderr: []string{"unknown flag -grcp; did you mean --grpc?\n"}},
		{args: []string{"serve", "-p", "8081"}, code: 2, stderr: []string{"streamgate serve: unknown flag -p; did you mean --http?\n"}},
		{args: []string{"serve", "--port", "8081"}, code: 2, stderr: []string{"streamgate serve: unknown flag --port; did you mean --http?\n"}},
		{args: []string{"engine", "--port=8001"}, code: 2, stderr: []string{"streamgate engine: unknown flag --port; did you mean --grpc?\n"}},
		{args: []string{"serve", "--http", "localhost"}, code: 2, stderr: []string{"streamgate: --http: \"localhost\": missing port; want HOST:PORT, :PORT (every interface) or a PORT alone (loopback)\n"}},
		{args: []string{"--version"}, stdout: []string{"streamgate ", " go1."}},
		{args: []string{"version"}, stdout: []string{"streamgate ", " go1."}},
		{args: []string{"serve", "--version"}, stdout: []string{"streamgate ", " go1."}},
		{args: []string{"models", "pull", "--version"}, stdout: []string{"streamgate ", " go1."}},
		{args: []string{"bench", "--c", "2", "--version"}, stdout: []string{"streamgate ", " go1."}},
		{args: []string{"help"}, stdout: []string{"\n  version "}},
		{args: []string{"serve", "--upstream", "10.0.0.1:8001"}, code: 2, stderr: []string{"streamgate serve: unknown flag --upstream; it is a flag of streamgate gateway\n"}},
		{args: []string{"bench", "--trnasport", "ws"}, code: 2, stderr: []string{"streamgate bench: unknown flag --trnasport; did you mean --transport?\n", "Run 'streamgate bench --help' for its flags.\n"}},
		{args: []string{"models", "pull", "--hbu", "x", "stories15M"}, code: 2, stderr: []string{"streamgate models pull: unknown flag --hbu; did you mean --hub?\n"}},
		{args: []string{"serve", "--log-format", "xml"}, code: 2, stderr: []string{"streamgate serve: invalid value \"xml\" for flag --log-format: want auto, json or text\n", "Run 'streamgate serve --help' for its flags.\n"}},
		{args: []string{"gateway", "--max-body"}, code: 2, stderr: []string{"streamgate gateway: flag needs an argument: --max-body\n"}},
		{args: []string{"engine", "extra"}, code: 2, stderr: []string{"streamgate engine: unexpected argument \"extra\": streamgate engine takes only flags\n"}},
		{args: []string{"--http", ":1", "serve"}, code: 2, stderr: []string{"streamgate: --http before a command: flags go after it, as streamgate <command> --http\n"}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			cmd := exec.Command(bin, tc.args...)
			cmd.Env = testEnv()
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			code := 0
			if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tc.code {
				t.Errorf("exit status %d, want %d", code, tc.code)
			}
			checkInOrder(t, "stdout", stdout.String(), tc.stdout)
			checkInOrder(t, "stderr", stderr.String(), tc.stderr)
		})
	}
}

// checkInOrder checks that out holds each of want, in order, and is
// empty when want is.
func checkInOrder(t *testing.T, name, out string, want []string) {
	t.Helper()
	if len(want) == 0 {
		if out != "" {
			t.Errorf("%s not empty:\n%s", name, out)
		}
		return
	}
	rest := out
	for _, w := range want {
		i := strings.Index(rest, w)
		if i < 0 {
			t.Errorf("%s lacks %q (in order):\n%s", name, w, out)
			return
		}
		rest = rest[i+len(w):]
	}
}

// Every command has a purpose, at least two examples, its flags in
// labelled groups, and examples that name commands and flags that exist
// with values they accept.
func TestCommandsTeach(t *testing.T) {
	root := commands()
	if err := root.Validate(); err != nil {
		t.Fatal(err)
	}
	var check func(path string, c *cli.Command)
	check = func(path string, c *cli.Command) {
		if len(c.Examples) < 2 {
			t.Errorf("%s: %d examples, want two or three", path, len(c.Examples))
		}
		for _, sub := range c.Commands {
			check(path+" "+sub.Name, sub)
		}
	}
	check(root.Name, root)
}
