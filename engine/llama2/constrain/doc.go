// Package constrain enforces a JSON schema while a model samples: the
// schema compiles (Compile, AnyJSON) into a pushdown automaton over bytes,
// and a Matcher walks every vocabulary token's bytes through it (the
// tokens in a trie, so shared prefixes are walked once) to mask the logits
// of the tokens that would break the constraint. Masks are cached per
// automaton state, so a state met again costs a map lookup.
//
// The output is compact JSON: at most one space between tokens, none
// before or after the value (a streaming client parses from the first byte). Numbers have at most 16 digits in each part. Objects
// take their declared properties only, each at most once, in the order
// the schema declares them.
package constrain
