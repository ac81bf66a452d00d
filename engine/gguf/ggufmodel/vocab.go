package ggufmodel

import (
	"fmt"

	"github.com/streamgate/streamgate/engine/gguf"
	"github.com/streamgate/streamgate/engine/llama2/tokenizer"
)

// VocabMetadata returns the tokenizer.* metadata of v, as llama.cpp's
// converter writes it, with chatTemplate ("" for none).
func VocabMetadata(v tokenizer.Vocab, chatTemplate string) []gguf.KV {
	kv := []gguf.KV{{Key: "tokenizer.ggml.model", Value: v.Model}}
	if v.Pre != "" {
		kv = append(kv, gguf.KV{Key: "tokenizer.ggml.pre", Value: v.Pre})
	}
	kv = append(kv, gguf.KV{Key: "tokenizer.ggml.tokens", Value: v.Tokens})
	if v.Scores != nil {
		kv = append(kv, gguf.KV{Key: "tokenizer.ggml.scores", Value: v.Scores})
	}
	if v.Types != nil {
		kv = append(kv, gguf.KV{Key: "tokenizer.ggml.token_type", Value: v.Types})
	}
	if v.Merges != nil {
		kv = append(kv, gguf.KV{Key: "tokenizer.ggml.merges", Value: v.Merges})
	}
	for _, id := range []struct {
		key string
		v   int32
	}{{"bos", v.BOS}, {"eos", v.EOS}, {"unknown", v.UNK}, {"padding", v.PAD}, {"eot", v.EOT}, {"eom", v.EOM}} {
		if id.v != tokenizer.NoToken {
			kv = append(kv, gguf.KV{Key: "tokenizer.ggml." + id.key + "_token_id", Value: uint32(id.v)})
		}
	}
	kv = append(kv,
		gguf.KV{Key: "tokenizer.ggml.add_bos_token", Value: v.AddBOS},
		gguf.KV{Key: "tokenizer.ggml.add_eos_token", Value: v.AddEOS})
	if v.Model == "llama" {
		kv = append(kv, gguf.KV{Key: "tokenizer.ggml.add_space_prefix", Value: v.AddSpacePrefix})
	}
	if chatTemplate != "" {
		kv = append(kv, gguf.KV{Key: "tokenizer.chat_template", Value: chatTemplate})
	}
	return kv
}

// ChatML is the chat template of the small Qwen vocabularies.
const ChatML = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"

// words are the pieces beyond single bytes in the small vocabularies.
var words = []string{"the", "and", "to", "of", "a", "in", "is", "you", "that", "it", "he", "was", "for", "on", "are",
	"as", "with", "his", "they", "at", "be", "this", "have", "from", "or", "one", "had", "by", "word", "but", "not",
	"what", "all", "were", "we", "when", "your", "can", "said", "there", "use", "an", "each", "which", "she", "do",
	"how", "their", "if", "will", "up", "other", "about", "out", "many", "then", "them", "these", "so", "some",
	"her", "would", "make", "like", "him", "into", "time", "has", "look", "two", "more", "write", "go", "see",
	"number", "no", "way", "could", "people", "my", "than", "first", "water", "been", "call", "who", "oil", "its",
	"now", "find", "long", "down", "day", "did", "get", "come", "made", "may", "part", "Hello", "world", "model"}

// SmallVocab returns a small real-format vocabulary for arch: for llama a
// SentencePiece one (<unk>, <s>, </s>, 256 byte tokens, then "▁word"
// pieces and letters), 512 tokens; for qwen2 and qwen3 a byte-level BPE one
// (the 256 byte symbols, merges of common letter pairs, and the ChatML
// special tokens) with pre-tokenizer qwen2.
func SmallVocab(arch string) tokenizer.Vocab {
	if arch == "llama" {
		v := tokenizer.NewVocab("llama")
		v.BOS, v.EOS, v.UNK, v.AddBOS, v.AddSpacePrefix = 1, 2, 0, true, true
		addTok := func(s string, score float32, typ int32) {
			v.Tokens = append(v.Tokens, s)
			v.Scores = append(v.Scores, score)
			v.Types = append(v.Types, typ)
		}
		addTok("<unk>", 0, 2)
		addTok("<s>", 0, 3)
		addTok("</s>", 0, 3)
		for b := range 256 {
			addTok(fmt.Sprintf("<0x%02X>", b), 0, 6)
		}
		seen := map[string]bool{}
		for _, w := range append(append([]string{}, words...), "▁") {
			for _, p := range []string{"▁" + w, w} {
				if !seen[p] && len(v.Tokens) < 512 {
					seen[p] = true
					addTok(p, -float32(len(v.Tokens)), 1)
				}
			}
		}
		for c := 'a'; c <= 'z' && len(v.Tokens) < 512; c++ {
			if p := string(c); !seen[p] {
				seen[p] = true
				addTok(p, -float32(len(v.Tokens)), 1)
			}
		}
		for i := 0; len(v.Tokens) < 512; i++ {
			addTok(fmt.Sprintf("▁x%d", i), -1000-float32(i), 1)
		}
		return v
	}
	v := tokenizer.NewVocab("gpt2")
	v.Pre = "qwen2"
	sym := byteSymbols()
	for b := range 256 {
		v.Tokens = append(v.Tokens, sym[b])
		v.Types = append(v.Types, 1)
	}
	have := map[string]bool{}
	for _, t := range v.Tokens {
		have[t] = true
	}
	// Merge each word left to right, and "Ġ"+word likewise.
	for _, w := range words {
		for _, full := range []string{w, sym[' '] + w} {
			cur := string([]rune(full)[0])
			for _, r := range []rune(full)[1:] {
				next := cur + string(r)
				if !have[next] && len(v.Tokens) < 480 {
					v.Merges = append(v.Merges, cur+" "+string(r))
					v.Tokens = append(v.Tokens, next)
					v.Types = append(v.Types, 1)
					have[next] = true
				}
				if !have[next] {
					break
				}
				cur = next
			}
		}
	}
	special := func(s string) int32 {
		v.Tokens = append(v.Tokens, s)
		v.Types = append(v.Types, 3)
		return int32(len(v.Tokens) - 1)
	}
	v.BOS = special("<|endoftext|>")
	imStart := special("<|im_start|>")
	v.EOS = special("<|im_end|>")
	v.EOT = v.EOS
	_ = imStart
	return v
}

// byteSymbols is GPT-2's byte-to-symbol table: printable Latin-1 bytes
// stand for themselves, the others for code points from U+0100 up.
func byteSymbols() [256]string {
	var out [256]string
	n := 0
	for b := range 256 {
		if b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE {
			out[b] = string(rune(b))
		} else {
			out[b] = string(rune(256 + n))
			n++
		}
	}
	return out
}
