package cli

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
)

// The reference lists every flag and variable of every command under a
// root, built from the commands' own definitions (Setup): top-level
// commands whose groups share a label are one section (serve, engine and
// gateway share "Listen addresses"), and in a section each group is one
// table of rows, one per distinct flag (name, usage and default) with the
// commands that define it.

type refSection struct {
	Tops   []string // the top-level commands, in order
	Groups []refGroup
}

type refGroup struct {
	Label string
	Rows  []*refRow
}

type refRow struct {
	Flag     *flag.Flag // nil for a variable
	Env      EnvVar
	Commands []string // paths without the root's name: "serve", "models pull"
}

// leafFlags is one command that runs, with its flag set.
type leafFlags struct {
	top  int    // index of its top-level command in root.Commands
	name string // its path without the root's name
	fs   *FlagSet
}

func reference(root *Command) []refSection {
	var leaves []leafFlags
	for i, top := range root.Commands {
		top.walk(nil, func(path []*Command) {
			c := path[len(path)-1]
			if c.Setup == nil {
				return
			}
			fs := NewFlagSet(root.Name + " " + pathName(path))
			c.Setup(fs)
			leaves = append(leaves, leafFlags{top: i, name: pathName(path), fs: fs})
		})
	}
	// Top-level commands sharing a group label are one section
	// (union-find over the commands, by label).
	parent := make([]int, len(root.Commands))
	for i := range parent {
		parent[i] = i
	}
	var find func(int) int
	find = func(i int) int {
		if parent[i] != i {
			parent[i] = find(parent[i])
		}
		return parent[i]
	}
	byLabel := map[string]int{}
	for _, l := range leaves {
		for _, g := range l.fs.Groups() {
			if first, ok := byLabel[g.Label]; ok {
				parent[find(l.top)] = find(first)
			} else {
				byLabel[g.Label] = l.top
			}
		}
	}
	var sections []refSection
	sectionOf := map[int]int{} // union-find root → index in sections
	for i, top := range root.Commands {
		r := find(i)
		if _, ok := sectionOf[r]; !ok {
			sectionOf[r] = len(sections)
			sections = append(sections, refSection{})
		}
		s := &sections[sectionOf[r]]
		s.Tops = append(s.Tops, top.Name)
	}
	for _, l := range leaves {
		s := &sections[sectionOf[find(l.top)]]
		prev := -1 // where the command's previous group is in s.Groups
		for _, g := range l.fs.Groups() {
			at := slices.IndexFunc(s.Groups, func(x refGroup) bool { return x.Label == g.Label })
			if at < 0 {
				at = prev + 1
				s.Groups = slices.Insert(s.Groups, at, refGroup{Label: g.Label})
			}
			prev = at
			rg := &s.Groups[at]
			for _, f := range g.Flags {
				rg.add(&refRow{Flag: f}, l.name)
			}
			for _, e := range g.Env {
				rg.add(&refRow{Env: e}, l.name)
			}
		}
	}
	for _, s := range sections {
		for _, g := range s.Groups {
			slices.SortStableFunc(g.Rows, func(a, b *refRow) int {
				if (a.Flag == nil) != (b.Flag == nil) {
					if a.Flag == nil {
						return 1
					}
					return -1
				}
				if a.Flag == nil {
					return 0 // variables as declared
				}
				return strings.Compare(a.Flag.Name, b.Flag.Name)
			})
		}
	}
	return sections
}

// add adds command to the row that is the same flag or variable as r,
// or r as a new row.
func (g *refGroup) add(r *refRow, command string) {
	for _, x := range g.Rows {
		same := x.Flag == nil && r.Flag == nil && x.Env == r.Env
		if x.Flag != nil && r.Flag != nil {
			same = x.Flag.Name == r.Flag.Name && x.Flag.Usage == r.Flag.Usage && x.Flag.DefValue == r.Flag.DefValue
		}
		if same {
			if !slices.Contains(x.Commands, command) {
				x.Commands = append(x.Commands, command)
			}
			return
		}
	}
	r.Commands = []string{command}
	g.Rows = append(g.Rows, r)
}

func (s refSection) title(root *Command) string {
	return root.Name + " " + strings.Join(s.Tops, ", ")
}

const referenceIntro = "Every flag can also be set by its environment variable, named beside it (STREAMGATE_ and the flag's name in upper case, dashes as underscores); a flag given on the command line wins."

// WriteReference writes the reference of every flag and environment
// variable of the commands under root, as text, grouped as their help
// groups them: what "help config" prints.
func WriteReference(w io.Writer, root *Command) error {
	var b strings.Builder
	b.WriteString(wrap("Every flag and environment variable of "+root.Name+"'s commands. "+referenceIntro, "", helpWidth) + "\n")
	for _, s := range reference(root) {
		title := s.title(root)
		fmt.Fprintf(&b, "\n%s\n%s\n", title, strings.Repeat("=", len(title)))
		for _, g := range s.Groups {
			b.WriteString("\n" + g.label() + ":\n")
			for _, r := range g.Rows {
				if r.Flag != nil {
					writeFlag(&b, r.Flag, "["+strings.Join(r.Commands, ", ")+"]")
				} else {
					writeEnv(&b, r.Env, "["+strings.Join(r.Commands, ", ")+"]")
				}
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func (g refGroup) label() string {
	if g.Label == "" {
		return "Flags"
	}
	return g.Label
}

// WriteMarkdown writes the reference as a Markdown section: a heading of
// the given level ("Configuration"), a table per group, one row per flag
// or variable.
func WriteMarkdown(w io.Writer, root *Command, level int) error {
	h := strings.Repeat("#", level)
	var b strings.Builder
	fmt.Fprintf(&b, "%s Configuration\n\n", h)
	fmt.Fprintf(&b, "Every flag of every command and the other environment variables they read, generated from the flag definitions: `%s help config` prints the same, `%s help COMMAND` (or `%s COMMAND --help`) one command's, with examples. %s\n",
		root.Name, root.Name, root.Name, mdText(referenceIntro))
	for _, s := range reference(root) {
		tops := make([]string, len(s.Tops))
		for i, t := range s.Tops {
			tops[i] = "`" + t + "`"
		}
		fmt.Fprintf(&b, "\n%s# %s %s\n", h, root.Name, strings.Join(tops, ", "))
		for _, g := range s.Groups {
			fmt.Fprintf(&b, "\n%s## %s\n\n", h, mdText(g.label()))
			b.WriteString("| flag or variable | commands | default | what it does |\n|---|---|---|---|\n")
			for _, r := range g.Rows {
				name, def, usage := "`"+r.Env.Name+"`", "", r.Env.Usage
				if f := r.Flag; f != nil {
					value, u := unquoteUsage(f)
					name = "`--" + f.Name
					if value != "" {
						name += " " + value
					}
					name += "`<br>`" + EnvName(f.Name) + "`"
					if d := defaultValue(f); d != "" {
						def = "`" + strings.ReplaceAll(d, "|", `\|`) + "`"
					}
					usage = u
				}
				fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", name, strings.Join(r.Commands, ", "), def, mdText(usage))
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// mdText escapes s for a Markdown table cell: nothing in it is markup.
var mdText = strings.NewReplacer(`\`, `\\`, "|", `\|`, "<", "&lt;", ">", "&gt;", "*", `\*`, "_", `\_`, "`", "\\`", "[", `\[`, "]", `\]`).Replace
