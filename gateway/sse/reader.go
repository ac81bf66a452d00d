package sse

import (
	"bufio"
	"bytes"
	"io"
	"strings"
)

// Event is one parsed event or comment.
type Event struct {
	// ID is the event's "id:" field, "" if it had none.
	ID string
	// Name is the event's "event:" field, "" if it had none.
	Name string
	// Data is the event's data lines joined by "\n".
	Data string
	// Comment holds the text of a comment line (": keepalive" gives
	// "keepalive"); such an entry has no ID or Data.
	Comment string
	// IsComment reports whether this entry is a comment.
	IsComment bool
}

// Reader parses an event stream, for clients and tests. It is not safe for
// concurrent use.
type Reader struct {
	br *bufio.Reader
}

// NewReader returns a Reader over r.
func NewReader(r io.Reader) *Reader { return &Reader{br: bufio.NewReader(r)} }

// Next returns the next event or comment. It returns io.EOF at a clean end
// of stream and io.ErrUnexpectedEOF when the stream ends inside an event.
func (r *Reader) Next() (Event, error) {
	var ev Event
	var data []string
	started := false
	for {
		line, err := r.br.ReadString('\n')
		if err != nil {
			if err == io.EOF && (started || line != "") {
				return ev, io.ErrUnexpectedEOF
			}
			return ev, err
		}
		line = strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")
		if line == "" {
			if !started {
				continue
			}
			ev.Data = strings.Join(data, "\n")
			return ev, nil
		}
		if line[0] == ':' && !started {
			// A comment is reported on its own; its blank line (if any)
			// is skipped by the next call.
			return Event{IsComment: true, Comment: strings.TrimPrefix(line[1:], " ")}, nil
		}
		started = true
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "id":
			ev.ID = value
		case "event":
			ev.Name = value
		case "data":
			data = append(data, value)
		}
	}
}

// Frames splits a complete event-stream body into its raw frames (each
// ending with its blank line), for byte-level assertions.
func Frames(body []byte) []string {
	var out []string
	for len(body) > 0 {
		i := bytes.Index(body, []byte("\n\n"))
		if i < 0 {
			out = append(out, string(body))
			break
		}
		out = append(out, string(body[:i+2]))
		body = body[i+2:]
	}
	return out
}
