package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

// A Command is one command of the program: what its help teaches, its
// flags, and what it runs. A command either runs (Setup is set) or
// groups subcommands (Commands); the root of the tree is the program
// itself, named as it is typed.
type Command struct {
	// Name is the word that selects the command ("serve", "pull").
	Name string
	// Purpose is one line: what the command is for, lower case, no
	// final period.
	Purpose string
	// Args is what the command takes after its flags, as its usage line
	// shows it ("NAME..."). Empty: nothing; other arguments are an error.
	Args string
	// About is what help prints after the usage line, wrapped as written.
	// Empty: nothing.
	About string
	// Examples are two or three command lines a reader can run.
	Examples []Example

	// Setup defines the command's flags on fs, in groups, and returns what
	// runs the command once they are parsed. Help, the reference and
	// Validate call it without running the command, so it must only
	// define flags.
	Setup func(fs *FlagSet) Run
	// Commands are the subcommands of a command without Setup.
	Commands []*Command
}

// An Example is a command line of a command's help.
type Example struct {
	Comment string // what it does, one line
	Line    string // a shell command line, run as written
}

// A Run runs a command whose flags are parsed, with the arguments that
// are not flags.
type Run func(ctx context.Context, args []string, stdout, stderr io.Writer) error

// A UsageError is a command line that names no command, an unknown one,
// or flags and arguments the command refuses.
type UsageError struct {
	Path string // the command as far as it was understood: "streamgate serve"
	Err  error
	// Hint is the line that says where to read more; "" for none.
	Hint string
}

func (e *UsageError) Error() string { return e.Path + ": " + e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// Exit writes err for a person to read on stderr and returns the exit
// status: 0 when err is nil, else 2. A *UsageError is written as its
// command and what went wrong, then its hint; any other error after
// "prog: ".
func Exit(stderr io.Writer, prog string, err error) int {
	if err == nil {
		return 0
	}
	var u *UsageError
	if errors.As(err, &u) {
		fmt.Fprintln(stderr, u.Error())
		if u.Hint != "" {
			fmt.Fprintln(stderr, u.Hint)
		}
		return 2
	}
	fmt.Fprintf(stderr, "%s: %v\n", prog, err)
	return 2
}

// Main runs the command that args (the program's arguments, without its
// name) select under root: its flags are parsed (Parse), then it runs.
// Help is written to stdout: "help [COMMAND...]", "help config" (the
// reference, WriteReference), -h or --help anywhere a command or flag
// may be, and "COMMAND help" for a command that takes no arguments. No command, an unknown command and a refused flag or argument
// are a *UsageError; a command that names none also gets its help on
// stderr.
func Main(ctx context.Context, root *Command, args []string, stdout, stderr io.Writer) error {
	inv, err := resolve(root, args, os.LookupEnv)
	switch {
	case err != nil:
		return err
	case inv.noCommand:
		writeHelp(stderr, inv.path, nil)
		return &UsageError{Path: pathName(inv.path), Err: errors.New("no command given")}
	case inv.reference:
		return WriteReference(stdout, root)
	case inv.help:
		writeHelp(stdout, inv.path, inv.fs)
		return nil
	case inv.version:
		fmt.Fprintln(stdout, Version(root.Name))
		return nil
	}
	return inv.run(ctx, inv.args, stdout, stderr)
}

// An invocation is what a command line asks for.
type invocation struct {
	path      []*Command // root first
	fs        *FlagSet   // the command's flags, parsed unless help; nil for a group
	run       Run
	args      []string // the arguments that are not flags
	help      bool     // the help of path
	reference bool     // help config
	version   bool     // version, or --version anywhere a flag may be
	noCommand bool     // path ends at a group and no command follows
}

// resolve finds the command args select and parses its flags, reading
// the environment with lookup (nil: none).
func resolve(root *Command, args []string, lookup func(string) (string, bool)) (*invocation, error) {
	inv := &invocation{path: []*Command{root}}
	c := root
	for c.Setup == nil {
		if len(args) == 0 {
			inv.noCommand = true
			return inv, nil
		}
		a := args[0]
		switch {
		case isHelpFlag(a):
			inv.help = true
			return inv, nil
		case isVersionFlag(a) || (a == "version" && len(inv.path) == 1):
			inv.version = true
			return inv, nil
		case a == "help":
			return resolveHelp(inv, args[1:])
		case strings.HasPrefix(a, "-"):
			return nil, &UsageError{Path: pathName(inv.path), Err: fmt.Errorf("%s before a command: flags go after it, as %s <command> %s", a, pathName(inv.path), a),
				Hint: "Run '" + helpCommand(inv.path) + "' for the commands."}
		}
		sub := c.find(a)
		if sub == nil {
			return nil, unknownCommand(inv.path, a)
		}
		inv.path = append(inv.path, sub)
		c, args = sub, args[1:]
	}
	inv.fs = NewFlagSet(pathName(inv.path))
	inv.run = c.Setup(inv.fs)
	for _, a := range args {
		if a == "--" {
			break
		}
		if isVersionFlag(a) {
			inv.version = true
			return inv, nil
		}
	}
	rest, err := parse(inv.fs, args, lookup)
	hint := "Run '" + pathName(inv.path) + " --help' for its flags."
	if errors.Is(err, flag.ErrHelp) {
		inv.help = true
		return inv, nil
	}
	if err != nil {
		var uf *UnknownFlagError
		if errors.As(err, &uf) && uf.Suggestion == "" {
			uf.Elsewhere = definedElsewhere(inv.path[0], uf.Name, c)
		}
		return nil, &UsageError{Path: pathName(inv.path), Err: err, Hint: hint}
	}
	if len(rest) == 1 && rest[0] == "help" && c.Args == "" {
		inv.help = true // "streamgate serve help"
		return inv, nil
	}
	if len(rest) > 0 && c.Args == "" {
		return nil, &UsageError{Path: pathName(inv.path), Err: fmt.Errorf("unexpected argument %q: %s takes only flags", rest[0], pathName(inv.path)), Hint: hint}
	}
	inv.args = rest
	return inv, nil
}

// resolveHelp resolves "help [NAME...]" after inv.path.
func resolveHelp(inv *invocation, names []string) (*invocation, error) {
	inv.help = true
	if len(inv.path) == 1 && len(names) == 1 && names[0] == "config" {
		inv.reference = true
		return inv, nil
	}
	for _, name := range names {
		c := inv.path[len(inv.path)-1]
		sub := c.find(name)
		if sub == nil {
			return nil, unknownCommand(inv.path, name)
		}
		inv.path = append(inv.path, sub)
	}
	if c := inv.path[len(inv.path)-1]; c.Setup != nil {
		inv.fs = NewFlagSet(pathName(inv.path))
		c.Setup(inv.fs)
	}
	return inv, nil
}

func unknownCommand(path []*Command, name string) error {
	c := path[len(path)-1]
	var names []string
	for _, sub := range c.Commands {
		names = append(names, sub.Name)
	}
	names = append(names, "help")
	if len(path) == 1 {
		names = append(names, "config", "version")
	}
	msg := fmt.Sprintf("unknown command %q", name)
	if s := Closest(name, names); s != "" {
		msg += "; did you mean " + s + "?"
	}
	return &UsageError{Path: pathName(path), Err: errors.New(msg), Hint: "Run '" + helpCommand(path) + "' for the commands."}
}

// definedElsewhere lists the commands under root, but not, that define
// the flag name.
func definedElsewhere(root *Command, name string, not *Command) []string {
	var out []string
	root.walk(nil, func(path []*Command) {
		c := path[len(path)-1]
		if c == not || c.Setup == nil {
			return
		}
		fs := NewFlagSet(pathName(path))
		c.Setup(fs)
		if fs.Lookup(name) != nil {
			out = append(out, pathName(path))
		}
	})
	return out
}

func (c *Command) find(name string) *Command {
	for _, sub := range c.Commands {
		if sub.Name == name {
			return sub
		}
	}
	return nil
}

// walk calls fn with the path of c and of every command under it, depth
// first in order.
func (c *Command) walk(parent []*Command, fn func(path []*Command)) {
	path := append(parent[:len(parent):len(parent)], c)
	fn(path)
	for _, sub := range c.Commands {
		sub.walk(path, fn)
	}
}

func isHelpFlag(a string) bool { return a == "-h" || a == "--help" || a == "-help" }

func isVersionFlag(a string) bool { return a == "--version" || a == "-version" }

// helpCommand is the command line that shows the help of path:
// "streamgate help models".
func helpCommand(path []*Command) string {
	return strings.TrimSpace(path[0].Name + " help " + pathName(path[1:]))
}

// pathName is the command as typed: "streamgate models pull".
func pathName(path []*Command) string {
	names := make([]string, len(path))
	for i, c := range path {
		names[i] = c.Name
	}
	return strings.Join(names, " ")
}
