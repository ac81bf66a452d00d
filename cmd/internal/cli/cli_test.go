package cli

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestClosest(t *testing.T) {
	names := []string{"grpc", "http", "max-streams", "max-streams-per-conn", "upstream", "upstream-streams", "ws-max-in-flight", "ws-ping-interval", "ws-ping-timeout", "c"}
	for _, tc := range []struct{ in, want string }{
		{"upstream-stream", "upstream-streams"}, // one deletion
		{"upstreams-streams", "upstream-streams"},
		{"grcp", "grpc"}, // a swap is one edit
		{"HTTP", "http"}, // case is free
		{"ws_max_in_flight", "ws-max-in-flight"},
		{"max-stream", "max-streams"},
		{"in-flight", "ws-max-in-flight"}, // the only one ending so
		{"ping", ""},                      // two begin with ws-ping: no guess
		{"x", ""},                         // too short to guess
		{"tls", ""},
		{"model", ""},
	} {
		if got := Closest(tc.in, names); got != tc.want {
			t.Errorf("Closest(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if got := Closest("serv", []string{"serve", "engine", "gateway", "help"}); got != "serve" {
		t.Errorf("Closest(serv) = %q", got)
	}
}

func testFlagSet() (*FlagSet, *string, *time.Duration, *bool) {
	fs := NewFlagSet("prog cmd")
	var addr string
	var d time.Duration
	var b bool
	fs.StringVar(&addr, "addr", "127.0.0.1:1", "listen `address`")
	fs.Group("Timing")
	fs.DurationVar(&d, "grace", time.Second, "how long")
	fs.Env("OTHER_VAR", "something else")
	fs.Group("Switches")
	fs.BoolVar(&b, "on", false, "turn it on")
	fs.Group("Timing")
	fs.DurationVar(new(time.Duration), "delay", 0, "a delay")
	return fs, &addr, &d, &b
}

func TestGroups(t *testing.T) {
	fs, _, _, _ := testFlagSet()
	var got []string
	for _, g := range fs.Groups() {
		s := g.Label + ":"
		for _, f := range g.Flags {
			s += " --" + f.Name
		}
		for _, e := range g.Env {
			s += " $" + e.Name
		}
		got = append(got, s)
	}
	if want := ": --addr|Timing: --delay --grace $OTHER_VAR|Switches: --on"; strings.Join(got, "|") != want {
		t.Errorf("groups %q, want %q", strings.Join(got, "|"), want)
	}
}

func TestParse(t *testing.T) {
	env := func(kv ...string) func(string) (string, bool) {
		return func(k string) (string, bool) {
			for i := 0; i < len(kv); i += 2 {
				if kv[i] == k {
					return kv[i+1], true
				}
			}
			return "", false
		}
	}
	fs, addr, grace, on := testFlagSet()
	rest, err := parse(fs, []string{"a", "--grace", "3s", "b", "--", "--on", "c"}, env("STREAMGATE_ADDR", "127.0.0.1:9", "STREAMGATE_GRACE", "2s"))
	if err != nil || *addr != "127.0.0.1:9" || *grace != 3*time.Second || *on || strings.Join(rest, " ") != "a b --on c" {
		t.Errorf("parse: %v; addr %s grace %v on %v rest %q", err, *addr, *grace, *on, rest)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if !set["addr"] || !set["grace"] || set["on"] {
		t.Errorf("flags set from a variable or an argument: %v", set)
	}

	for _, tc := range []struct {
		args []string
		env  []string
		want string
	}{
		{[]string{"--adr", "x"}, nil, "unknown flag --adr; did you mean --addr?"},
		{[]string{"--nope"}, nil, "unknown flag --nope"},
		{[]string{"--grace", "soon"}, nil, `invalid value "soon" for flag --grace: parse error`},
		{[]string{"--grace"}, nil, "flag needs an argument: --grace"},
		{nil, []string{"STREAMGATE_GRACE", "soon"}, `STREAMGATE_GRACE="soon": parse error`},
	} {
		fs, _, _, _ := testFlagSet()
		_, err := parse(fs, tc.args, env(tc.env...))
		if err == nil || err.Error() != tc.want {
			t.Errorf("parse(%q, env %q): %v, want %q", tc.args, tc.env, err, tc.want)
		}
	}
	fs, _, _, _ = testFlagSet()
	if _, err := parse(fs, []string{"--on", "-h"}, nil); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v", err)
	}
}

// testTree is a program with a command that runs, a group of two and
// flags shared between them.
func testTree(ran *[]string) *Command {
	run := func(name string) Run {
		return func(_ context.Context, args []string, stdout, _ io.Writer) error {
			*ran = append(*ran, name+" "+strings.Join(args, " "))
			io.WriteString(stdout, "ran "+name)
			return nil
		}
	}
	return &Command{
		Name:     "prog",
		Purpose:  "a test program",
		Examples: []Example{{Comment: "start it", Line: "prog start --addr :1"}, {Line: "prog db pull --to x a b"}},
		Commands: []*Command{
			{
				Name:     "start",
				Purpose:  "start the thing",
				Examples: []Example{{Line: "prog start"}, {Line: "PROG_X=1 prog start --addr :2 --grace 1s"}},
				Setup: func(fs *FlagSet) Run {
					fs.Group("Listening")
					fs.String("addr", ":8080", "listen `address`")
					fs.Group("Timing")
					fs.Duration("grace", time.Second, "how long to wait")
					return run("start")
				},
			},
			{
				Name:    "db",
				Purpose: "the database",
				Commands: []*Command{{
					Name:     "pull",
					Purpose:  "pull rows",
					Args:     "NAME...",
					Examples: []Example{{Line: "prog db pull a"}, {Line: "prog db pull --to x a && prog start"}},
					Setup: func(fs *FlagSet) Run {
						fs.Group("Listening")
						fs.String("addr", ":8080", "listen `address`")
						fs.Group("Storage")
						fs.String("to", "", "where to | put *them*")
						fs.Env("DB_URL", "the database")
						return run("pull")
					},
				}},
			},
		},
	}
}

func TestMainDispatch(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		ran     string
		stdout  string // a part of it
		stderr  string // a part of it
		errText string // "" for none
	}{
		{args: []string{"start", "--grace", "2s"}, ran: "start ", stdout: "ran start"},
		{args: []string{"db", "pull", "a", "--to", "x", "b"}, ran: "pull a b", stdout: "ran pull"},
		{args: nil, stderr: "Usage:\n  prog <command> [flags]", errText: "prog: no command given"},
		{args: []string{"help"}, stdout: "Commands:\n  start    start the thing\n  db       the database\n  help     help on a command"},
		{args: []string{"help"}, stdout: "\n  version  the version of this build"},
		{args: []string{"--version"}, stdout: "prog "},
		{args: []string{"start", "--version"}, stdout: "prog "},
		{args: []string{"-h"}, stdout: "prog: a test program"},
		{args: []string{"help", "start"}, stdout: "prog start: start the thing\n\nUsage:\n  prog start [flags]\n\nExamples:\n  prog start\n"},
		{args: []string{"start", "--help"}, stdout: "Listening:\n  --addr address\n      listen address\n      default \":8080\"; env STREAMGATE_ADDR\n\nTiming:\n"},
		{args: []string{"start", "help"}, stdout: "prog start: start the thing\n"},
		{args: []string{"db", "pull", "-h"}, stdout: "Usage:\n  prog db pull [flags] NAME...\n"},
		{args: []string{"help", "db"}, stdout: "Commands:\n  pull  pull rows\n"},
		{args: []string{"db"}, stderr: "Commands:\n  pull", errText: "prog db: no command given"},
		{args: []string{"help", "config"}, stdout: "prog start, db\n"},
		{args: []string{"strat"}, errText: `prog: unknown command "strat"; did you mean start?`},
		{args: []string{"db", "pul"}, errText: `prog db: unknown command "pul"; did you mean pull?`},
		{args: []string{"help", "db", "x"}, errText: `prog db: unknown command "x"`},
		{args: []string{"start", "--to", "x"}, errText: "prog start: unknown flag --to; it is a flag of prog db pull"},
		{args: []string{"start", "--graze", "1s"}, errText: "prog start: unknown flag --graze; did you mean --grace?"},
		{args: []string{"start", "now"}, errText: `prog start: unexpected argument "now": prog start takes only flags`},
		{args: []string{"--addr", "x"}, errText: "prog: --addr before a command"},
	} {
		var ran []string
		var stdout, stderr bytes.Buffer
		err := Main(context.Background(), testTree(&ran), tc.args, &stdout, &stderr)
		if (err == nil) != (tc.errText == "") || err != nil && !strings.HasPrefix(err.Error(), tc.errText) {
			t.Errorf("%q: error %v, want %q", tc.args, err, tc.errText)
		}
		if strings.Join(ran, ",") != tc.ran {
			t.Errorf("%q: ran %q, want %q", tc.args, ran, tc.ran)
		}
		if !strings.Contains(stdout.String(), tc.stdout) || tc.stdout == "" && stdout.Len() > 0 {
			t.Errorf("%q: stdout\n%s\nwant it to hold %q", tc.args, stdout.String(), tc.stdout)
		}
		if !strings.Contains(stderr.String(), tc.stderr) || tc.stderr == "" && stderr.Len() > 0 {
			t.Errorf("%q: stderr\n%s\nwant it to hold %q", tc.args, stderr.String(), tc.stderr)
		}
	}
}

func TestExit(t *testing.T) {
	var b bytes.Buffer
	if Exit(&b, "prog", nil) != 0 || b.Len() != 0 {
		t.Errorf("nil: %q", b.String())
	}
	if Exit(&b, "prog", &UsageError{Path: "prog start", Err: errors.New("unknown flag --x"), Hint: "Run 'prog start --help' for its flags."}) != 2 ||
		b.String() != "prog start: unknown flag --x\nRun 'prog start --help' for its flags.\n" {
		t.Errorf("usage error: %q", b.String())
	}
	b.Reset()
	if Exit(&b, "prog", errors.New("listen: address in use")) != 2 || b.String() != "prog: listen: address in use\n" {
		t.Errorf("failure: %q", b.String())
	}
}

func TestValidate(t *testing.T) {
	var ran []string
	if err := testTree(&ran).Validate(); err != nil {
		t.Fatalf("valid tree: %v", err)
	}
	bad := testTree(&ran)
	bad.Commands[0].Examples = append(bad.Commands[0].Examples, Example{Line: "prog start --addrr :1 | tee log"})
	bad.Commands[1].Commands[0].Examples = append(bad.Commands[1].Commands[0].Examples, Example{Line: "prog db pul a"})
	bad.Commands = append(bad.Commands, &Command{Name: "loose", Purpose: "flags in no group", Setup: func(fs *FlagSet) Run {
		fs.Bool("x", false, "x")
		return nil
	}}, &Command{Name: "mute"})
	err := bad.Validate()
	for _, want := range []string{
		`prog start: example "prog start --addrr :1 | tee log": prog start: unknown flag --addrr; did you mean --addr?`,
		`prog db pull: example "prog db pull a": `[:0] + `prog db pull: example "prog db pul a": prog db: unknown command "pul"; did you mean pull?`,
		"prog loose: flags or variables in no group",
		"prog mute: a command needs a name and a purpose",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v\nwant it to report %q", err, want)
		}
	}
}

func TestInvocations(t *testing.T) {
	got := invocations(`A=1 B="x y" prog a --b 'c d' && other prog | prog e;prog f & prog g`, "prog")
	want := [][]string{{"a", "--b", "c d"}, {"e;prog", "f"}, {"g"}}
	if len(got) != len(want) {
		t.Fatalf("invocations %q, want %q", got, want)
	}
	for i := range want {
		if strings.Join(got[i], "|") != strings.Join(want[i], "|") {
			t.Errorf("invocation %d: %q, want %q", i, got[i], want[i])
		}
	}
}

func TestReference(t *testing.T) {
	var ran []string
	root := testTree(&ran)
	root.Commands = append(root.Commands, &Command{Name: "bench", Purpose: "load", Setup: func(fs *FlagSet) Run {
		fs.Group("Load")
		fs.Int("c", 8, "concurrency")
		return nil
	}})
	var md bytes.Buffer
	if err := WriteMarkdown(&md, root, 2); err != nil {
		t.Fatal(err)
	}
	want := "## Configuration\n\n" +
		"Every flag of every command and the other environment variables they read, generated from the flag definitions: `prog help config` prints the same, `prog help COMMAND` (or `prog COMMAND --help`) one command's, with examples. Every flag can also be set by its environment variable, named beside it (STREAMGATE\\_ and the flag's name in upper case, dashes as underscores); a flag given on the command line wins.\n" +
		// start and db share the group Listening: one section.
		"\n### prog `start`, `db`\n" +
		"\n#### Listening\n\n| flag or variable | commands | default | what it does |\n|---|---|---|---|\n" +
		"| `--addr address`<br>`STREAMGATE_ADDR` | start, db pull | `:8080` | listen address |\n" +
		// Storage follows Listening, as in db pull, before Timing.
		"\n#### Storage\n\n| flag or variable | commands | default | what it does |\n|---|---|---|---|\n" +
		"| `--to string`<br>`STREAMGATE_TO` | db pull |  | where to \\| put \\*them\\* |\n" +
		"| `DB_URL` | db pull |  | the database |\n" +
		"\n#### Timing\n\n| flag or variable | commands | default | what it does |\n|---|---|---|---|\n" +
		"| `--grace duration`<br>`STREAMGATE_GRACE` | start | `1s` | how long to wait |\n" +
		"\n### prog `bench`\n" +
		"\n#### Load\n\n| flag or variable | commands | default | what it does |\n|---|---|---|---|\n" +
		"| `--c int`<br>`STREAMGATE_C` | bench | `8` | concurrency |\n"
	if md.String() != want {
		t.Errorf("Markdown:\n%s\nwant:\n%s", md.String(), want)
	}

	var text bytes.Buffer
	if err := WriteReference(&text, root); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"\nprog start, db\n==============\n", "\nListening:\n  --addr address", "[start, db pull]\n      listen address\n      default \":8080\"; env STREAMGATE_ADDR\n", "  DB_URL", "\nprog bench\n"} {
		if !strings.Contains(text.String(), w) {
			t.Errorf("reference lacks %q:\n%s", w, text.String())
		}
	}
}

func TestWrap(t *testing.T) {
	got := wrap("aaa bbb ccc dddddddddddd e", "  ", 10)
	if want := "  aaa bbb\n  ccc\n  dddddddddddd\n  e"; got != want {
		t.Errorf("wrap: %q, want %q", got, want)
	}
}
