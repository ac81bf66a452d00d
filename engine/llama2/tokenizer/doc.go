// Package tokenizer reads llama2.c tokenizer.bin files and implements
// llama2.c's byte-pair encoding: a dummy-prefix space, code points looked up
// whole with byte fallback, then greedy merges by score. Decoding handles
// byte tokens (<0xHH>) and drops the space a piece starts with after BOS.
//
// Encode gives llama2.c's tokens exactly, in O(n log n) time (merge.go:
// a heap of adjacent pairs over a linked list of tokens, instead of
// llama2.c's rescan of every pair after each merge), and stops when its
// context is done. MaxTokenBytes bounds the text one token stands for, so
// a caller can refuse a prompt too long for its context before encoding
// it.
//
// Start with Load, then Tokenizer.Encode and Tokenizer.Piece.
package tokenizer
