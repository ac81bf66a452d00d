package openai

import (
	"strings"
	"testing"
)

// BenchmarkParseChat: a chat request of one 100-word user message.
func BenchmarkParseChat(b *testing.B) {
	body := []byte(`{"max_tokens":100,"messages":[{"content":"` + strings.Repeat("word ", 99) + `word","role":"user"}],"model":"echo","stream":true}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseChat(body); err != nil {
			b.Fatal(err)
		}
	}
}
