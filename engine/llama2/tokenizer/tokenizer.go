package tokenizer

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
)

// Special token ids of llama2.c vocabularies.
const (
	Unknown = 0
	BOS     = 1
	EOS     = 2
)

// ErrFormat is wrapped by every error about a malformed tokenizer file.
var ErrFormat = errors.New("not a valid llama2.c tokenizer")

// Tokenizer is a loaded vocabulary. It is immutable and safe for concurrent
// use.
type Tokenizer struct {
	pieces   []string
	decoded  []string // what each token decodes to: the piece, or its raw byte
	scores   []float32
	ids      map[string]int32
	byteID   [256]int32
	maxLen   int
	spaceID  int32
	hasSpace bool

	maxTokenBytes int // see MaxTokenBytes
}

// Load reads a tokenizer.bin with vocab entries (the count comes from the
// model's header, not the file).
func Load(path string, vocab int) (*Tokenizer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	t, err := Parse(data, vocab)
	if err != nil {
		return nil, fmt.Errorf("tokenizer %s: %w", path, err)
	}
	return t, nil
}

// maxPieceLen bounds one piece, so a foreign file fails fast.
const maxPieceLen = 1 << 16

// Parse reads tokenizer.bin contents: int32 max_token_length, then per
// entry float32 score, int32 length, length bytes.
func Parse(data []byte, vocab int) (*Tokenizer, error) {
	if vocab <= 0 {
		return nil, fmt.Errorf("vocabulary size %d is not positive", vocab)
	}
	le := binary.LittleEndian
	if len(data) < 4 {
		return nil, fmt.Errorf("%w: %d bytes, too short for the header", ErrFormat, len(data))
	}
	maxLen := int(int32(le.Uint32(data)))
	if maxLen <= 0 || maxLen > maxPieceLen {
		return nil, fmt.Errorf("%w: max_token_length %d is out of range", ErrFormat, maxLen)
	}
	t := &Tokenizer{
		pieces:  make([]string, vocab),
		decoded: make([]string, vocab),
		scores:  make([]float32, vocab),
		ids:     make(map[string]int32, vocab),
		maxLen:  maxLen,
	}
	for i := range t.byteID {
		t.byteID[i] = -1
	}
	// The pieces are substrings of one copy of the file, so loading costs
	// a few allocations rather than one per entry.
	all := string(data)
	off := 4
	longest := 0
	for i := range vocab {
		if len(data)-off < 8 {
			return nil, fmt.Errorf("%w: entry %d of %d is truncated at byte %d", ErrFormat, i, vocab, off)
		}
		t.scores[i] = math.Float32frombits(le.Uint32(data[off:]))
		n := int(int32(le.Uint32(data[off+4:])))
		off += 8
		if n < 0 || n > maxLen || n > len(data)-off {
			return nil, fmt.Errorf("%w: entry %d has length %d (max_token_length %d, %d bytes left)", ErrFormat, i, n, maxLen, len(data)-off)
		}
		p := all[off : off+n]
		off += n
		longest = max(longest, n)
		t.pieces[i] = p
		t.decoded[i] = p
		if b, ok := byteToken(p); ok {
			t.decoded[i] = byteStrings[b : int(b)+1]
			if t.byteID[b] < 0 {
				t.byteID[b] = int32(i)
			}
		}
		if _, dup := t.ids[p]; !dup {
			t.ids[p] = int32(i)
		}
	}
	if off != len(data) {
		return nil, fmt.Errorf("%w: %d trailing bytes after %d entries (vocabulary size mismatch?)", ErrFormat, len(data)-off, vocab)
	}
	for b := range t.byteID {
		if t.byteID[b] < 0 && b+3 < vocab {
			t.byteID[b] = int32(b + 3) // llama2.c's fixed layout
		}
	}
	if id, ok := t.ids[" "]; ok {
		t.spaceID, t.hasSpace = id, true
	}
	t.maxTokenBytes = longest
	for b := range t.byteID {
		if t.pieces[t.fallback(byte(b))] == "" {
			t.maxTokenBytes = 0
		}
	}
	return t, nil
}

// byteStrings holds every byte value once, for the one-byte strings that
// byte tokens decode to.
var byteStrings = func() string {
	b := make([]byte, 256)
	for i := range b {
		b[i] = byte(i)
	}
	return string(b)
}()

// byteToken parses a "<0xHH>" piece (upper-case hex, as llama2.c writes it).
func byteToken(p string) (byte, bool) {
	if len(p) != 6 || p[:3] != "<0x" || p[5] != '>' {
		return 0, false
	}
	hex := func(c byte) (byte, bool) {
		switch {
		case c >= '0' && c <= '9':
			return c - '0', true
		case c >= 'A' && c <= 'F':
			return c - 'A' + 10, true
		case c >= 'a' && c <= 'f':
			return c - 'a' + 10, true
		}
		return 0, false
	}
	hi, ok1 := hex(p[3])
	lo, ok2 := hex(p[4])
	return hi<<4 | lo, ok1 && ok2
}

// Vocab returns the number of tokens.
func (t *Tokenizer) Vocab() int { return len(t.pieces) }

// Piece returns the text of token tok following token prev: byte tokens
// decode to their raw byte, and a piece after BOS loses its leading space.
func (t *Tokenizer) Piece(prev, tok int) string {
	if tok < 0 || tok >= len(t.decoded) {
		return ""
	}
	p := t.decoded[tok]
	if prev == BOS && len(p) > 0 && p[0] == ' ' {
		p = p[1:]
	}
	return p
}

// MaxTokenBytes returns the most bytes of text that one token of Encode's
// output can stand for, or 0 when the vocabulary sets no such bound.
//
// The bound is the longest piece. Every token Encode starts from stands
// for at most as many bytes as its piece holds: a code point found in the
// vocabulary is its own piece, and a byte-fallback token stands for one
// byte while its piece ("<0xHH>", or whatever the file holds at that id)
// is at least one byte long. A merge joins two tokens into the token whose
// piece is the two pieces joined, so it keeps that property, and no piece
// is longer than the longest. A vocabulary whose fallback piece for some
// byte is empty breaks the first step (empty pieces could then merge any
// number of bytes into one token), so it has no bound.
func (t *Tokenizer) MaxTokenBytes() int { return t.maxTokenBytes }

// ctxCheckEvery is how many merges Encode runs between looks at its
// context: well under a millisecond of work.
const ctxCheckEvery = 1 << 10

// Encode tokenizes text the way llama2.c does, optionally framed by BOS and
// EOS. It takes O(n log n) time in the length of text, and stops early with
// ctx's error once ctx is done.
func (t *Tokenizer) Encode(ctx context.Context, text string, bos, eos bool) ([]int, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	toks := make([]int, 0, len(text)+3)
	if bos {
		toks = append(toks, BOS)
	}
	start := len(toks) // merging starts after BOS, with the dummy prefix
	toks = t.appendSymbols(toks, text)
	merged, err := t.merge(ctx, toks[start:])
	if err != nil {
		return nil, err
	}
	toks = toks[:start+len(merged)]
	if eos {
		toks = append(toks, EOS)
	}
	return toks, nil
}

// appendSymbols appends the tokens that merging starts from: the dummy
// prefix (unless text is empty), then each UTF-8 code point's token, or
// its bytes' fallback tokens.
func (t *Tokenizer) appendSymbols(toks []int, text string) []int {
	if text != "" && t.hasSpace {
		toks = append(toks, int(t.spaceID))
	}
	for i := 0; i < len(text); {
		// A code point: a leading byte and up to three continuation bytes.
		j := i + 1
		for j < len(text) && j-i < 4 && text[j]&0xC0 == 0x80 {
			j++
		}
		if id, ok := t.ids[text[i:j]]; ok {
			toks = append(toks, int(id))
		} else {
			for k := i; k < j; k++ {
				toks = append(toks, int(t.fallback(text[k])))
			}
		}
		i = j
	}
	return toks
}

// fallback returns the token of byte b when its code point has none.
func (t *Tokenizer) fallback(b byte) int32 {
	if id := t.byteID[b]; id >= 0 {
		return id
	}
	return Unknown
}
