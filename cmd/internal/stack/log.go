package stack

import (
	"fmt"
	"io"
	"log/slog"

	"github.com/streamgate/streamgate/cmd/internal/cli"
	"github.com/streamgate/streamgate/cmd/internal/telemetry"
)

// LogFlags choose how a process logs.
type LogFlags struct {
	// Format is LogJSON (the default: one JSON object a line) or LogText
	// (key=value).
	Format LogFormat
	// Level is the least severe level logged. Default slog.LevelInfo.
	Level slog.Level
}

// A LogFormat is the value of --log-format: LogJSON or LogText.
type LogFormat string

const (
	LogJSON LogFormat = "json"
	LogText LogFormat = "text"
)

func (l *LogFormat) String() string { return string(*l) }

func (l *LogFormat) Set(s string) error {
	switch f := LogFormat(s); f {
	case LogJSON, LogText:
		*l = f
		return nil
	}
	return fmt.Errorf("want %s or %s", LogJSON, LogText)
}

func (l *LogFlags) register(fs *cli.FlagSet) {
	fs.Group("Logs")
	l.Format = LogJSON
	fs.Var(&l.Format, "log-format", "log line `format`: json (an object a line; inside a request with its trace_id and span_id) or text (key=value)")
	fs.TextVar(&l.Level, "log-level", slog.LevelInfo, "least severe `level` logged: debug, info, warn or error")
}

// Logger is the logger f's log flags describe, writing to w, with the
// trace_id and span_id of the request's span on every line written with
// a request's context (telemetry.LogHandler).
func (f *Flags) Logger(w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: f.Log.Level}
	var h slog.Handler
	if f.Log.Format == LogText {
		h = slog.NewTextHandler(w, opts)
	} else {
		h = slog.NewJSONHandler(w, opts)
	}
	return slog.New(telemetry.LogHandler(h))
}
