package engine

import (
	"github.com/streamgate/streamgate/engine/backend"
	"github.com/streamgate/streamgate/engine/echo"
	"github.com/streamgate/streamgate/engine/identity"
	"github.com/streamgate/streamgate/engine/llama2"
	"github.com/streamgate/streamgate/engine/repeat"
	"github.com/streamgate/streamgate/engine/square"
)

// DefaultBackends returns the backends the engine knows, by config name.
func DefaultBackends() map[string]backend.Factory {
	return map[string]backend.Factory{
		"repeat":   repeat.New,
		"square":   square.New,
		"echo":     echo.New,
		"identity": identity.New,
		// llama2 models are not in the built-in repository: they need
		// weights (see llama2.FindModelDir and streamgate's --model-dir).
		llama2.BackendName: llama2.New,
	}
}
