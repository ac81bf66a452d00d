package stack

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/streamgate/streamgate/cmd/internal/cli"
	"github.com/streamgate/streamgate/cmd/internal/jsonlog"
	"github.com/streamgate/streamgate/cmd/internal/logbuf"
	"github.com/streamgate/streamgate/cmd/internal/telemetry"
)

// LogFlags choose how a process logs.
type LogFlags struct {
	// Format is LogAuto (the default: LogText when the log goes to a
	// terminal, else LogJSON), LogJSON (one JSON object a line) or
	// LogText (key=value).
	Format LogFormat
	// Level is the least severe level logged. Default slog.LevelInfo.
	Level slog.Level
	// Flush is how long a line below WARN may wait in the log's buffer
	// before it is written out (logbuf); lines at WARN and above, and a
	// full buffer, go out at once. Zero: every line is written at once.
	// Default DefaultLogFlush.
	Flush time.Duration
}

// DefaultLogFlush is --log-flush's default: request lines are written out
// ten times a second, not one write each.
const DefaultLogFlush = 100 * time.Millisecond

// A LogFormat is the value of --log-format: LogAuto, LogJSON or LogText.
type LogFormat string

const (
	LogAuto LogFormat = "auto"
	LogJSON LogFormat = "json"
	LogText LogFormat = "text"
)

func (l *LogFormat) String() string { return string(*l) }

func (l *LogFormat) Set(s string) error {
	switch f := LogFormat(s); f {
	case LogAuto, LogJSON, LogText:
		*l = f
		return nil
	}
	return fmt.Errorf("want %s, %s or %s", LogAuto, LogJSON, LogText)
}

func (l *LogFlags) register(fs *cli.FlagSet) {
	fs.Group("Logs")
	l.Format = LogAuto
	fs.Var(&l.Format, "log-format", "log line `format`: text (key=value) or json (an object a line; inside a request with its trace_id and span_id); auto is text on a terminal, else json")
	fs.TextVar(&l.Level, "log-level", slog.LevelInfo, "least severe `level` logged: debug, info, warn or error")
	fs.DurationVar(&l.Flush, "log-flush", DefaultLogFlush, "longest `duration` a line below warn waits in the log's 64 KB buffer before it is written (warnings, errors and a full buffer go out at once); 0 writes every line at once")
}

// Logger is the logger f's log flags describe, writing to w, with the
// trace_id and span_id of the request's span on every line written with
// a request's context (telemetry.LogHandler). Durations are written as
// Go writes them ("10s", "1.5ms"), in either format. Lines below WARN
// wait up to f.Log.Flush in a buffer (logbuf); closeLog writes out what
// is buffered, and later lines go out at once: call it before the
// process exits.
func (f *Flags) Logger(w io.Writer) (log *slog.Logger, closeLog func()) {
	format := f.Log.Format
	if format == LogAuto || format == "" {
		format = LogJSON
		if isTerminal(w) {
			format = LogText
		}
	}
	buf := logbuf.New(w, f.Log.Flush)
	var h slog.Handler
	if format == LogText {
		h = slog.NewTextHandler(buf, &slog.HandlerOptions{Level: f.Log.Level, ReplaceAttr: jsonlog.DurationText})
	} else {
		h = jsonlog.New(buf, f.Log.Level) // slog's JSON lines, the common ones cheaper
	}
	return slog.New(telemetry.LogHandler(logbuf.Handler(h, buf))), func() { buf.Close() }
}

// isTerminal reports whether w is a terminal, which a person reads: a
// file whose terminal settings can be read.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), getTermios)
	return err == nil
}
