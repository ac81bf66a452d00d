// Package tokenizer holds the engine's tokenizers, behind one interface
// (Codec): llama2.c's, and those that GGUF files describe.
//
// llama2.c: Load reads a tokenizer.bin, and Tokenizer implements
// llama2.c's byte-pair encoding: a dummy-prefix space, code points looked
// up whole with byte fallback, then greedy merges by score. Decoding
// handles byte tokens (<0xHH>) and drops the space a piece starts with
// after BOS. Encode gives llama2.c's tokens exactly, in O(n log n) time
// (merge.go: a heap of adjacent pairs over a linked list of tokens,
// instead of llama2.c's rescan of every pair after each merge), and stops
// when its context is done. MaxTokenBytes bounds the text one token stands
// for, so a caller can refuse a prompt too long for its context before
// encoding it.
//
// GGUF: FromVocab builds a GGUF tokenizer from a Vocab, the
// tokenizer.ggml.* metadata: SentencePiece-style BPE ("llama": scores,
// <0xXX> byte fallback, add_space_prefix) or byte-level BPE ("gpt2":
// merge ranks over GPT-2's byte-to-character mapping, the text first cut
// into words by the pre-tokenizer tokenizer.ggml.pre names: gpt2,
// llama-bpe, qwen2, smollm), as llama.cpp tokenizes. Control and
// user-defined tokens spelled in the text are matched first (control ones
// only when parse-special is on); add_bos/add_eos frame the text; every
// end-of-generation token (EOS, EOT, EOM, <|eot_id|>, <|im_end|>,
// <|end_of_text|>, <|endoftext|>, ...) ends a generation. Token ids match
// Hugging Face's tokenizers on the corpus of package hfref (gguf_test.go).
package tokenizer
