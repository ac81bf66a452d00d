package tokenizer

import (
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
	off := 4
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
		p := string(data[off : off+n])
		off += n
		t.pieces[i] = p
		t.decoded[i] = p
		if b, ok := byteToken(p); ok {
			t.decoded[i] = string([]byte{b})
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
	return t, nil
}

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

// Encode tokenizes text the way llama2.c does, optionally framed by BOS and
// EOS.
func (t *Tokenizer) Encode(text string, bos, eos bool) []int {
	toks := make([]int, 0, len(text)+3)
	if bos {
		toks = append(toks, BOS)
	}
	start := len(toks) // merging starts after BOS, with the dummy prefix
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
				id := t.byteID[text[k]]
				if id < 0 {
					id = Unknown
				}
				toks = append(toks, int(id))
			}
		}
		i = j
	}
	toks = append(toks[:start], t.merge(toks[start:])...)
	if eos {
		toks = append(toks, EOS)
	}
	return toks
}

// merge repeatedly merges the adjacent pair whose concatenation is the
// best-scoring piece (the first such pair on ties) until none merges.
func (t *Tokenizer) merge(toks []int) []int {
	buf := make([]byte, 0, 2*t.maxLen)
	for {
		best, bestID := -1, int32(-1)
		bestScore := float32(-1e10) // llama2.c's floor: lower scores never merge
		for i := 0; i+1 < len(toks); i++ {
			a, b := t.pieces[toks[i]], t.pieces[toks[i+1]]
			if len(a)+len(b) > t.maxLen {
				continue
			}
			buf = append(append(buf[:0], a...), b...)
			id, ok := t.ids[string(buf)]
			if !ok {
				continue
			}
			if s := t.scores[id]; s > bestScore {
				best, bestID, bestScore = i, id, s
			}
		}
		if best < 0 {
			return toks
		}
		toks[best] = int(bestID)
		toks = append(toks[:best+1], toks[best+2:]...)
	}
}
