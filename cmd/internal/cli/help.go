package cli

import (
	"flag"
	"fmt"
	"io"
	"strings"
)

// helpWidth is the column help text is wrapped at.
const helpWidth = 80

// writeHelp writes the help of the command at the end of path: its
// purpose, usage, about, subcommands, examples, then its flags and
// variables by group (fs, nil for a group).
func writeHelp(w io.Writer, path []*Command, fs *FlagSet) {
	c := path[len(path)-1]
	name := pathName(path)
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s\n\nUsage:\n  %s", name, c.Purpose, name)
	if c.Setup == nil {
		b.WriteString(" <command>")
	}
	b.WriteString(" [flags]")
	if c.Args != "" {
		b.WriteString(" " + c.Args)
	}
	b.WriteString("\n")
	if c.About != "" {
		b.WriteString("\n" + strings.TrimRight(c.About, "\n") + "\n")
	}
	if len(c.Commands) > 0 {
		b.WriteString("\nCommands:\n")
		width := len("help")
		if len(path) == 1 {
			width = len("version")
		}
		for _, sub := range c.Commands {
			width = max(width, len(sub.Name))
		}
		for _, sub := range c.Commands {
			fmt.Fprintf(&b, "  %-*s  %s\n", width, sub.Name, sub.Purpose)
		}
		if len(path) == 1 {
			fmt.Fprintf(&b, "  %-*s  %s\n", width, "help", "help on a command ('"+name+" help serve'), or 'help config': every flag and variable")
			fmt.Fprintf(&b, "  %-*s  %s\n", width, "version", "the version of this build (also --version after any command)")
		}
	}
	if len(c.Examples) > 0 {
		b.WriteString("\nExamples:\n")
		for _, e := range c.Examples {
			if e.Comment != "" {
				b.WriteString("  # " + e.Comment + "\n")
			}
			b.WriteString("  " + e.Line + "\n")
		}
	}
	if fs != nil {
		for _, g := range fs.Groups() {
			label := g.Label
			if label == "" {
				label = "Flags"
			}
			b.WriteString("\n" + label + ":\n")
			for _, f := range g.Flags {
				writeFlag(&b, f, "")
			}
			for _, e := range g.Env {
				writeEnv(&b, e, "")
			}
		}
		b.WriteString("\n" + wrap("Every flag can also be set by its environment variable, named under it; a flag given on the command line wins. '"+
			path[0].Name+" help config' lists every command's flags and variables.", "", helpWidth) + "\n")
	} else if len(c.Commands) > 0 {
		fmt.Fprintf(&b, "\nRun '%s <command> --help' for the flags and examples of a command.\n", name)
	}
	io.WriteString(w, b.String())
}

// writeFlag writes f as help lists it: the flag and its value, then its
// usage, default and variable indented under it. extra, if set, follows
// the flag on its line (the reference's commands).
func writeFlag(b *strings.Builder, f *flag.Flag, extra string) {
	value, usage := unquoteUsage(f)
	head := "  --" + f.Name
	if value != "" {
		head += " " + value
	}
	writeEntry(b, head, extra, usage)
	line := "env " + EnvName(f.Name)
	if d := defaultValue(f); d != "" {
		if g, ok := f.Value.(flag.Getter); ok && isString(g) || strings.Contains(d, " ") {
			d = fmt.Sprintf("%q", d)
		}
		line = "default " + d + "; " + line
	}
	b.WriteString(wrap(line, "      ", helpWidth) + "\n")
}

func writeEnv(b *strings.Builder, e EnvVar, extra string) {
	writeEntry(b, "  "+e.Name, extra, e.Usage)
}

func writeEntry(b *strings.Builder, head, extra, usage string) {
	if extra != "" {
		head += strings.Repeat(" ", max(2, helpWidth-len(head)-len(extra))) + extra
	}
	b.WriteString(head + "\n" + wrap(usage, "      ", helpWidth) + "\n")
}

// unquoteUsage is flag.UnquoteUsage, but a boolean flag shows no value
// (--spawn, not --spawn bool).
func unquoteUsage(f *flag.Flag) (value, usage string) {
	value, usage = flag.UnquoteUsage(f)
	if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
		value = ""
	}
	return value, usage
}

func isString(g flag.Getter) bool {
	_, ok := g.Get().(string)
	return ok
}

// defaultValue is f's default as help shows it: "" when it is its type's
// zero (an empty string, 0, false, 0s), which the usage explains.
func defaultValue(f *flag.Flag) string {
	switch f.DefValue {
	case "", "0", "false", "0s":
		return ""
	}
	return f.DefValue
}

// wrap breaks s into lines of at most width columns (longer words keep
// a line of their own), each starting with indent.
func wrap(s, indent string, width int) string {
	var b strings.Builder
	line := indent
	for _, word := range strings.Fields(s) {
		if len(line) > len(indent) && len(line)+1+len(word) > width {
			b.WriteString(line + "\n")
			line = indent
		}
		if len(line) > len(indent) {
			line += " "
		}
		line += word
	}
	b.WriteString(line)
	return b.String()
}
