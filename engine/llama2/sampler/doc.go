// Package sampler picks the next token from logits exactly as llama2.c's
// run.c does: argmax at temperature 0, otherwise softmax at the temperature
// and multinomial or nucleus (top-p) sampling driven by a xorshift64* random
// number generator, so that a seed reproduces run.c's output.
//
// It also implements vLLM's sampling parameters (Options): repetition,
// frequency and presence penalties on the logits of tokens already seen,
// then min-p and top-k before run.c's top-p. With those off, the path and
// its random draws are run.c's exactly.
//
// Start with New and Sampler.Sample.
package sampler
