// Package llama2 is the engine backend that generates text with llama2.c
// checkpoints (Karpathy's stories260K by default) in pure Go.
//
// Start with New, the backend.Factory registered under the backend name
// "llama2"; Config builds the model configuration of the built-in model and
// FindModelDir finds its files. The sub-packages are the layers below:
// transformer (checkpoint loading and the batched forward pass), kernels
// (the arithmetic, behind an interface a GPU implementation could satisfy),
// tokenizer and sampler (llama2.c's BPE and sampling, bit for bit).
//
// # Inputs and outputs (vLLM-backend convention)
//
// Inputs: text_input (BYTES [1], the prompt); optional stream (BOOL [1],
// default false), sampling_parameters (BYTES [1], a JSON object with
// temperature (default 1.0; 0 is greedy), top_p (default 1.0), max_tokens
// (default 16), seed (default random), stop (a string or a list of strings)
// and ignore_eos (default false), and vLLM's top_k (default 0; 0 and -1
// are off), min_p (in [0, 1], default 0), repetition_penalty (> 0,
// default 1), frequency_penalty and presence_penalty (in [-2, 2], default
// 0), with vLLM's meanings: penalties first, then temperature, min_p,
// top_k and top_p), exclude_input_in_output (BOOL [1], default false).
// Unknown keys and values out of range are INVALID_ARGUMENT errors.
//
// Outputs: text_output (BYTES [-1]), finish_reason (BYTES [1], "stop" for
// an end-of-text token or a stop sequence, "length" for max_tokens or the
// context length), num_input_tokens and num_output_tokens (UINT32 [1]; the
// input count includes BOS, the output count every sampled token, the
// end-of-text token included).
//
// A prompt longer than the context can hold is refused with
// INVALID_ARGUMENT before it is tokenized: no token stands for more bytes
// than the vocabulary's longest piece (7 for tok512, 27 for the Llama 2
// vocabulary), so a prompt over (seq_len-1)·that many bytes cannot fit
// (512 positions of stories260K: 3,577 bytes). Shorter prompts are refused
// when their tokens, BOS included, exceed seq_len. Tokenizing stops when
// the request is cancelled, and so does the prompt's prefill, between its
// chunks.
//
// Request parameter delay_ms (an integer in [0, 10000], streamgate's
// extension, as echo's) paces the output: Execute waits that long before
// each streamed piece, and a non-streaming request waits that long per
// output token before its answer. The wait is on the request's own
// goroutine, so the other sequences of the batch are not slowed; the paced
// sequence keeps being stepped until 64 pieces wait for it, like a slow
// client.
//
// With stream=true, each released piece of text is one Send carrying only
// text_output; Execute then returns the final response with the remaining
// text (usually "") and the three other outputs. The prompt is not echoed.
// With stream=false, the final response carries the whole text, after the
// prompt unless exclude_input_in_output is true. Text never splits a UTF-8
// character across responses, and a stop sequence and what follows it are
// never sent (text that may begin one is held back until it is decided).
//
// # Scheduling
//
// Execute releases its model instance at once; admission is the backend's.
// One scheduler goroutine per backend runs forward passes over every active
// sequence (continuous batching: sequences join and leave between steps;
// prompts are fed up to 64 positions per step beside the generating
// sequences). The pass is spread over parameters.workers cores (default
// GOMAXPROCS): by sessions for small models, by matrix rows for larger ones.
// Each active sequence holds one of max_sequences KV caches; up to
// max_queue more wait for one, and further requests fail with "llama2: too
// many requests". A request whose context is cancelled is dropped before its
// next step and its KV cache freed; a streaming request whose client falls
// 64 pieces behind is paused (it slows only itself). Close stops the
// scheduler and fails the requests still admitted. Seeded requests produce
// the same text whatever else runs beside them.
//
// Benchmarks: go test -run '^$' -bench . ./engine/llama2/ (the vector
// kernels are assembly, used on any AVX2+FMA amd64 CPU; -tags purego
// measures the portable Go kernels).
package llama2
