// Package tokenizer reads llama2.c tokenizer.bin files and implements
// llama2.c's byte-pair encoding: a dummy-prefix space, code points looked up
// whole with byte fallback, then greedy merges by score. Decoding handles
// byte tokens (<0xHH>) and drops the space a piece starts with after BOS.
//
// Start with Load, then Tokenizer.Encode and Tokenizer.Piece.
package tokenizer
