// Package llama2test writes small llama2.c model files with random weights
// for tests outside engine/llama2 (engine/llama2/internal/testmodel, which
// it wraps, cannot be imported from there): the command's model cache and
// serve tests load what it writes like any downloaded checkpoint.
//
// Start with WriteModel.
package llama2test

import (
	"github.com/streamgate/streamgate/engine/llama2/internal/testmodel"
)

// Vocab is the vocabulary size of the files WriteModel writes.
const Vocab = 512

// WriteModel writes a checkpoint (WriteCheckpoint) and a tokenizer
// (WriteTokenizer) with Vocab tokens.
func WriteModel(checkpoint, tokenizer string, seed uint64) error {
	if err := WriteCheckpoint(checkpoint, Vocab, seed); err != nil {
		return err
	}
	return WriteTokenizer(tokenizer, Vocab)
}

// WriteCheckpoint writes a legacy (version 0) llama2.c checkpoint with a
// vocabulary of vocab tokens and random weights from seed, of a shape so
// small that a test loads it in milliseconds. Different seeds give
// different bytes.
func WriteCheckpoint(path string, vocab int, seed uint64) error {
	s := testmodel.Shape{Dim: 16, Hidden: 32, Layers: 1, Heads: 2, KVHeads: 2, Vocab: vocab, SeqLen: 64, Shared: true}
	return testmodel.Random(path, s, seed)
}

// WriteTokenizer writes a tokenizer.bin with vocab >= 259 pieces: the
// special and byte pieces of llama2.c's layout, then "Once", " upon", " a",
// " time" and filler pieces.
func WriteTokenizer(path string, vocab int) error {
	return testmodel.WriteTokenizer(path, testmodel.Pieces(vocab, "Once", " upon", " a", " time"), nil)
}
