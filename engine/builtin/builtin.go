// Package builtin holds the model repository streamgate serves when no
// repository directory is given: repeat_int32, square_int32, echo and
// identity_int32, in Triton's layout (<model>/config.pbtxt).
package builtin

import "embed"

// FS is the built-in model repository.
//
//go:embed */config.pbtxt
var FS embed.FS
