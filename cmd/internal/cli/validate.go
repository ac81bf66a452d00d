package cli

import (
	"errors"
	"fmt"
	"strings"
)

// Validate checks the tree under root as Main, help and the reference
// rely on it: every command has a name and a purpose, and runs or has
// subcommands (not both); every flag and variable is in a labelled group;
// and every example's command lines that start with root's name name
// commands and flags that exist, with values they accept (read as
// written: the environment is not consulted).
func (root *Command) Validate() error {
	var errs []error
	root.walk(nil, func(path []*Command) {
		c := path[len(path)-1]
		name := pathName(path)
		switch {
		case c.Name == "" || c.Purpose == "":
			errs = append(errs, fmt.Errorf("%s: a command needs a name and a purpose", name))
		case (c.Setup == nil) == (len(c.Commands) == 0):
			errs = append(errs, fmt.Errorf("%s: a command either runs (Setup) or has subcommands", name))
		}
		if c.Setup != nil {
			fs := NewFlagSet(name)
			c.Setup(fs)
			for _, g := range fs.Groups() {
				if g.Label == "" {
					errs = append(errs, fmt.Errorf("%s: flags or variables in no group (call Group before defining them)", name))
				}
			}
		}
		for _, e := range c.Examples {
			for _, args := range invocations(e.Line, root.Name) {
				if _, err := resolve(root, args, nil); err != nil {
					errs = append(errs, fmt.Errorf("%s: example %q: %v", name, e.Line, err))
				}
			}
		}
	})
	return errors.Join(errs...)
}

// invocations are the arguments of every command in the shell line that
// runs prog: the line is split at whitespace outside quotes, then into
// commands at &&, ||, ;, | and &; assignments before a command are
// skipped.
func invocations(line, prog string) [][]string {
	var out [][]string
	var cmd []string
	end := func() {
		for len(cmd) > 0 && strings.Contains(cmd[0], "=") {
			cmd = cmd[1:]
		}
		if len(cmd) > 0 && cmd[0] == prog {
			out = append(out, cmd[1:])
		}
		cmd = nil
	}
	for _, w := range ShellWords(line) {
		switch w {
		case "&&", "||", ";", "|", "&":
			end()
		default:
			cmd = append(cmd, w)
		}
	}
	end()
	return out
}

// ShellWords splits s at whitespace outside single or double quotes,
// and removes the quotes.
func ShellWords(s string) []string {
	var words []string
	var w strings.Builder
	in, quote := false, rune(0)
	for _, r := range s {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			w.WriteRune(r)
		case r == '\'' || r == '"':
			quote, in = r, true
		case r == ' ' || r == '\t':
			if in {
				words = append(words, w.String())
				w.Reset()
				in = false
			}
		default:
			w.WriteRune(r)
			in = true
		}
	}
	if in {
		words = append(words, w.String())
	}
	return words
}
