// Package builtin holds the model repository streamgate serves when no
// repository directory is given (repeat_int32, square_int32, echo,
// identity_int32, Triton's sequence examples simple_sequence,
// simple_dyna_sequence, simple_string_dyna_sequence and
// custom_sequence_int32, and the streaming transcribe model, in Triton's
// layout <model>/config.pbtxt) and the backends those models need.
//
// The engine itself knows no backend: callers pass the set they want in
// engine.Options, usually
//
//	engine.Options{Repository: builtin.FS, Backends: builtin.Backends()}
//
// and add llama2.BackendName when they serve text-generation checkpoints.
package builtin

import (
	"embed"
	"maps"

	"github.com/streamgate/streamgate/engine/backend"
	"github.com/streamgate/streamgate/engine/echo"
	"github.com/streamgate/streamgate/engine/identity"
	"github.com/streamgate/streamgate/engine/repeat"
	"github.com/streamgate/streamgate/engine/sequence"
	"github.com/streamgate/streamgate/engine/square"
	"github.com/streamgate/streamgate/engine/transcribe"
)

// FS is the built-in model repository.
//
//go:embed */config.pbtxt
var FS embed.FS

// Backends returns a new map of the built-in backends by config name:
// repeat, square, echo, identity, transcribe and the sequence example
// backends (sequence, dyna_sequence, simple_sequence). The caller may add
// to it.
func Backends() map[string]backend.Factory {
	b := map[string]backend.Factory{
		"repeat":     repeat.New,
		"square":     square.New,
		"echo":       echo.New,
		"identity":   identity.New,
		"transcribe": transcribe.New,
	}
	maps.Copy(b, sequence.Backends())
	return b
}
