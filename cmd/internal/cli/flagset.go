package cli

import (
	"flag"
	"io"
	"slices"
	"sort"
	"strings"
)

// EnvPrefix starts the environment variable of every flag (see EnvName).
const EnvPrefix = "STREAMGATE_"

// EnvName is the environment variable of the flag name: STREAMGATE_ and
// the name in upper case, dashes as underscores (--max-body:
// STREAMGATE_MAX_BODY).
func EnvName(flagName string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// A FlagSet is a flag.FlagSet whose flags are in labelled groups, as help
// shows them, and which also names the environment variables its command
// reads besides its flags' own. Define flags with the embedded FlagSet's
// methods (a function that takes a *flag.FlagSet can be given
// fs.FlagSet); Group labels every flag defined after it.
//
// A FlagSet is not safe for concurrent use.
type FlagSet struct {
	*flag.FlagSet

	group  string            // the label of flags defined from now on
	labels []string          // every label, in the order first used
	placed map[string]string // flag name → label, once a later Group or Groups saw it
	env    []EnvVar
	// seeAlso maps names people try from other programs to the flag
	// that does the job here (port → http).
	seeAlso map[string]string
}

// An EnvVar is an environment variable a command reads that is not one of
// its flags' STREAMGATE_ variables.
type EnvVar struct {
	Name  string
	Usage string // what it does, as a flag's usage
	Group string // the label of its group
}

// NewFlagSet returns an empty FlagSet named name (the command's path, as
// "streamgate serve") that reports its errors only by returning them
// (flag.ContinueOnError, nothing printed).
func NewFlagSet(name string) *FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return &FlagSet{FlagSet: fs, labels: []string{""}, placed: map[string]string{}}
}

// Group puts the flags defined after it, up to the next Group, in the
// group label (as "Listen addresses" or "WebSocket"). Flags defined
// before the first Group are in the group "". A label used twice names
// one group, listed where it was first used.
func (fs *FlagSet) Group(label string) {
	fs.place()
	fs.group = label
	if !slices.Contains(fs.labels, label) {
		fs.labels = append(fs.labels, label)
	}
}

// Env declares an environment variable the command reads that is not a
// flag's, in the current group.
func (fs *FlagSet) Env(name, usage string) {
	fs.env = append(fs.env, EnvVar{Name: name, Usage: usage, Group: fs.group})
}

// SeeAlso makes an unknown flag name (any case) suggest the flag
// instead, as "did you mean": a name other programs use for what flag
// does here (--port for --http).
func (fs *FlagSet) SeeAlso(name, flag string) {
	if fs.seeAlso == nil {
		fs.seeAlso = map[string]string{}
	}
	fs.seeAlso[strings.ToLower(name)] = flag
}

// place puts every flag defined since the last call in the current group.
func (fs *FlagSet) place() {
	fs.VisitAll(func(f *flag.Flag) {
		if _, ok := fs.placed[f.Name]; !ok {
			fs.placed[f.Name] = fs.group
		}
	})
}

// A Group is the flags and variables under one label, flags by name and
// variables in the order declared.
type Group struct {
	Label string
	Flags []*flag.Flag
	Env   []EnvVar
}

// Groups returns fs's groups that have a flag or a variable, in the order
// their labels were first used.
func (fs *FlagSet) Groups() []Group {
	fs.place()
	var out []Group
	for _, label := range fs.labels {
		g := Group{Label: label}
		fs.VisitAll(func(f *flag.Flag) {
			if fs.placed[f.Name] == label {
				g.Flags = append(g.Flags, f)
			}
		})
		for _, e := range fs.env {
			if e.Group == label {
				g.Env = append(g.Env, e)
			}
		}
		if len(g.Flags)+len(g.Env) > 0 {
			out = append(out, g)
		}
	}
	return out
}

// flagNames are the names of fs's flags, sorted.
func (fs *FlagSet) flagNames() []string {
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	sort.Strings(names)
	return names
}
