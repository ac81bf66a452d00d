// Package cli is streamgate's command line: commands that teach their use
// (a one-line purpose, flags in groups, runnable examples), every flag
// also read from its STREAMGATE_<FLAG> environment variable, "did you
// mean" for mistyped commands and flags, and the configuration reference
// of every flag and variable, as text and as Markdown.
//
// Start with Command: a tree of them, the root being the program, is run
// by Main; a command's Setup defines its flags on a FlagSet, where Group
// labels the flags defined after it and Env declares the other variables
// the command reads. Parse reads a FlagSet from the environment and the
// arguments. Reference and Markdown build the reference from the same
// definitions, so that it cannot drift from them.
package cli
