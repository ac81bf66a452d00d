package ws

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/streamgate/streamgate/gateway/internal/jsonobj"
)

// Chunk is one piece of a sequence's input after its first: the body of a
// sequence.data or sequence.end frame, or the bytes of a binary frame.
type Chunk struct {
	// Body is a text frame's body (a JSON object); nil for a binary frame.
	Body json.RawMessage
	// Input and Data are a binary frame's: the model input its bytes are
	// (one BYTES element), and the bytes.
	Input string
	Data  []byte
	// End marks the sequence's last chunk.
	End bool
}

// Size is what Options.MaxChunkBytes bounds: the body's or the data's
// length.
func (c Chunk) Size() int { return len(c.Body) + len(c.Data) }

// Sequence is the input side of a running sequence.start request: the
// chunks its client sends after the first, in order. The session's reader
// puts them in a bounded queue (Options.SequenceQueue); the request's
// Handler takes them with Next.
type Sequence struct {
	chunks chan Chunk
	idle   time.Duration // Options.SequenceIdle
	ended  bool          // its END is queued (under Session.mu)
}

// MaxBinaryHeader bounds a binary frame's header, in bytes.
const MaxBinaryHeader = 1024

// Next waits for the sequence's next chunk. It fails with a *FrameError
// of code sequence_idle when none comes within the session's
// SequenceIdle, or limit when that is shorter (0: no limit of its own),
// and with ctx's cause when the request ends.
func (q *Sequence) Next(ctx context.Context, limit time.Duration) (Chunk, error) {
	select {
	case c := <-q.chunks:
		return c, nil
	default:
	}
	idle := q.idle
	if limit > 0 && (idle <= 0 || limit < idle) {
		idle = limit
	}
	var expired <-chan time.Time
	if idle > 0 {
		t := time.NewTimer(idle)
		defer t.Stop()
		expired = t.C
	}
	select {
	case c := <-q.chunks:
		return c, nil
	case <-expired:
		return Chunk{}, &FrameError{Code: CodeSequenceIdle, Message: "no chunk for " + idle.String() + ": the sequence was ended"}
	case <-ctx.Done():
		return Chunk{}, context.Cause(ctx)
	}
}

// ParseBinary decodes a binary frame: a header, a newline, then the
// chunk's bytes. The header is a JSON object of at most MaxBinaryHeader
// bytes: {"id": the sequence's id, "input": the model input the bytes are,
// "end": true on the sequence's last chunk (optional)}.
func ParseBinary(data []byte) (id string, c Chunk, fe *FrameError) {
	i := bytes.IndexByte(data[:min(len(data), MaxBinaryHeader+1)], '\n')
	if i < 0 {
		return "", c, &FrameError{Code: CodeBadRequest, Message: "a binary frame starts with a JSON header of at most " + strconv.Itoa(MaxBinaryHeader) + " bytes and a newline"}
	}
	members, err := jsonobj.Members(data[:i])
	if err != nil {
		return "", c, &FrameError{Code: CodeBadRequest, Message: "invalid binary frame header: " + err.Error()}
	}
	bad := func(format string, args ...any) (string, Chunk, *FrameError) {
		return "", Chunk{}, &FrameError{ID: id, Code: CodeBadRequest, Message: fmt.Sprintf(format, args...)}
	}
	for _, m := range members {
		switch m.Key {
		case "id":
			if json.Unmarshal(m.Value, &id) != nil {
				id = ""
				return bad("binary frame header field 'id' must be a string")
			}
		case "input":
			if json.Unmarshal(m.Value, &c.Input) != nil {
				return bad("binary frame header field 'input' must be a string")
			}
		case "end":
			if json.Unmarshal(m.Value, &c.End) != nil {
				return bad("binary frame header field 'end' must be a boolean")
			}
		default:
			return bad("unknown binary frame header field '%s'", m.Key)
		}
	}
	if id == "" || len(id) > MaxIDLength {
		id = ""
		return bad("binary frame header needs an 'id': a non-empty string of at most %d bytes", MaxIDLength)
	}
	if c.Input == "" {
		return bad("binary frame header needs 'input': the model input its bytes are")
	}
	c.Data = data[i+1:]
	return id, c, nil
}

// chunkBucket is Options.ChunkRate: a token bucket of chunks per second,
// as deep as one second's worth (at least one chunk). Only the session's
// reader uses it.
type chunkBucket struct {
	rate   float64
	tokens float64
	last   time.Time
}

// take spends one token; false when there is none.
func (b *chunkBucket) take(now time.Time) bool {
	if b.rate <= 0 {
		return true
	}
	depth := max(b.rate, 1)
	if b.last.IsZero() {
		b.tokens = depth
	} else {
		b.tokens = min(depth, b.tokens+now.Sub(b.last).Seconds()*b.rate)
	}
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}
