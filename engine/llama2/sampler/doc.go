// Package sampler picks the next token from logits exactly as llama2.c's
// run.c does: argmax at temperature 0, otherwise softmax at the temperature
// and multinomial or nucleus (top-p) sampling driven by a xorshift64* random
// number generator, so that a seed reproduces run.c's output.
//
// Start with New and Sampler.Sample.
package sampler
