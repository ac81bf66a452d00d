package cli

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
)

// Parse sets fs's flags from their environment variables (EnvName), then
// from args, which win, and returns the arguments that are not flags, in
// order. Flags and other arguments may be mixed; "--" ends the flags.
// A flag set from its variable counts as set (fs.Visit visits it).
//
// The error is flag.ErrHelp after -h or --help, an *UnknownFlagError for
// a flag fs does not define, or one naming the variable or flag at fault.
func Parse(fs *FlagSet, args []string) ([]string, error) {
	return parse(fs, args, os.LookupEnv)
}

// parse is Parse with the environment read by lookup (nil: none).
func parse(fs *FlagSet, args []string, lookup func(string) (string, bool)) ([]string, error) {
	if lookup != nil {
		var err error
		fs.VisitAll(func(f *flag.Flag) {
			if v, ok := lookup(EnvName(f.Name)); ok && err == nil {
				if e := fs.Set(f.Name, v); e != nil {
					err = fmt.Errorf("%s=%q: %v", EnvName(f.Name), v, e)
				}
			}
		})
		if err != nil {
			return nil, err
		}
	}
	var rest []string
	for {
		if err := fs.FlagSet.Parse(args); err != nil {
			return nil, flagError(fs, err, args)
		}
		left := fs.Args()
		if len(left) == 0 {
			return rest, nil
		}
		if n := len(args) - len(left); n > 0 && args[n-1] == "--" {
			return append(rest, left...), nil
		}
		rest = append(rest, left[0])
		args = left[1:]
	}
}

// An UnknownFlagError is a flag the command does not define.
type UnknownFlagError struct {
	Name string // as given, without its dashes
	// Dashes are the dashes it was given with, "-" or "--" ("" reads as
	// "--").
	Dashes string
	// Suggestion is the command's flag nearest to Name, "" when none is
	// near.
	Suggestion string
	// Elsewhere are the other commands that define Name (as "streamgate
	// gateway"); Main fills it in.
	Elsewhere []string
}

func (e *UnknownFlagError) Error() string {
	dashes := e.Dashes
	if dashes == "" {
		dashes = "--"
	}
	msg := "unknown flag " + dashes + e.Name
	switch {
	case e.Suggestion != "":
		msg += "; did you mean --" + e.Suggestion + "?"
	case len(e.Elsewhere) > 0:
		msg += "; it is a flag of " + strings.Join(e.Elsewhere, ", ")
	}
	return msg
}

// flagError turns the flag package's parse errors into ours: help, an
// unknown flag as it was written in args, with a suggestion, or the error
// naming flags as --name, as help writes them.
func flagError(fs *FlagSet, err error, args []string) error {
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		suggestion := Closest(name, fs.flagNames())
		if suggestion == "" {
			suggestion = fs.seeAlso[strings.ToLower(name)]
		}
		return &UnknownFlagError{Name: name, Dashes: dashesOf(name, args), Suggestion: suggestion}
	}
	for _, form := range []string{"for flag -", "needs an argument: -"} {
		msg = strings.Replace(msg, form, form+"-", 1)
	}
	return errors.New(msg)
}

// dashesOf returns the dashes the flag name was written with in args:
// "-" for -p, "--" for --p or when it is not found.
func dashesOf(name string, args []string) string {
	for _, a := range args {
		if a == "--" {
			break
		}
		if a == "-"+name || strings.HasPrefix(a, "-"+name+"=") {
			return "-"
		}
	}
	return "--"
}
