package cli

import (
	"runtime"
	"runtime/debug"
	"strings"
)

// Version is the line "prog version" and "prog --version" print: the
// module's version ("(devel)" for a build from a checkout), the commit
// and its time when the build recorded them, with "+dirty" for
// uncommitted changes, then Go's version and the platform:
//
//	streamgate (devel) 1a2b3c4d5e6f+dirty 2026-11-28T00:41:53Z go1.26.0 linux/amd64
func Version(prog string) string {
	parts := []string{prog}
	info, ok := debug.ReadBuildInfo()
	if ok {
		v := info.Main.Version
		if v == "" {
			v = "(devel)"
		}
		parts = append(parts, v)
		var rev, at string
		dirty := false
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.time":
				at = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if rev != "" {
			rev = rev[:min(len(rev), 12)]
			if dirty {
				rev += "+dirty"
			}
			parts = append(parts, rev)
		}
		if at != "" {
			parts = append(parts, at)
		}
	} else {
		parts = append(parts, "(unknown)")
	}
	parts = append(parts, runtime.Version(), runtime.GOOS+"/"+runtime.GOARCH)
	return strings.Join(parts, " ")
}
