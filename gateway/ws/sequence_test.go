package ws

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

var sequenceFrameCases = []struct {
	in      string
	id      string
	code    string
	wantErr string
}{
	{`{"type":"sequence.start","id":"s1","model":"m","body":{"x":1}}`, "", "", ""},
	{`{"type":"sequence.start","id":"s1","model":"m"}`, "", "", ""},
	{`{"type":"sequence.data","id":"s1","body":{"x":2}}`, "", "", ""},
	{`{"type":"sequence.end","id":"s1"}`, "", "", ""},
	{`{"type":"sequence.start","id":"s1"}`, "s1", CodeBadRequest, "a sequence.start frame needs 'model'"},
	{`{"type":"sequence.data","id":"s1"}`, "s1", CodeBadRequest, "a sequence.data frame needs a 'body' object"},
	{`{"type":"sequence.data","id":"s1","model":"m","body":{}}`, "s1", CodeBadRequest, "takes the model of its sequence.start"},
	{`{"type":"sequence.end","id":"s1","body":"x"}`, "s1", CodeBadRequest, "'body' must be an object"},
}

func TestParseSequenceFrames(t *testing.T) {
	for _, tc := range sequenceFrameCases {
		r, fe := ParseFrame([]byte(tc.in))
		if tc.wantErr == "" {
			if fe != nil || r == nil {
				t.Errorf("ParseFrame(%s) = %v", tc.in, fe)
			}
			continue
		}
		if fe == nil || fe.ID != tc.id || fe.Code != tc.code || !strings.Contains(fe.Message, tc.wantErr) {
			t.Errorf("ParseFrame(%s) = %+v, want id %q code %q containing %q", tc.in, fe, tc.id, tc.code, tc.wantErr)
		}
	}
}

var binaryCases = []struct {
	in      string
	id      string
	input   string
	data    string
	end     bool
	wantErr string
}{
	{"{\"id\":\"s1\",\"input\":\"audio\"}\n\x00\x01\xff", "s1", "audio", "\x00\x01\xff", false, ""},
	{"{\"id\":\"s1\",\"input\":\"audio\",\"end\":true}\n", "s1", "audio", "", true, ""},
	{"{\"id\":\"s1\",\"input\":\"a\"}\n\n{}\n", "s1", "a", "\n{}\n", false, ""},
	{"no header", "", "", "", false, "starts with a JSON header"},
	{"{\"id\":\"s1\"}\nx", "", "", "", false, "needs 'input'"},
	{"{\"input\":\"a\"}\nx", "", "", "", false, "needs an 'id'"},
	{"{\"id\":1,\"input\":\"a\"}\nx", "", "", "", false, "'id' must be a string"},
	{"{\"id\":\"s1\",\"input\":\"a\",\"end\":1}\nx", "", "", "", false, "'end' must be a boolean"},
	{"{\"id\":\"s1\",\"input\":\"a\",\"x\":1}\nx", "", "", "", false, "unknown binary frame header field 'x'"},
	{"[1]\nx", "", "", "", false, "invalid binary frame header"},
	{"{\"id\":\"" + strings.Repeat("x", MaxBinaryHeader) + "\"}\nx", "", "", "", false, "starts with a JSON header"},
}

func TestParseBinary(t *testing.T) {
	for _, tc := range binaryCases {
		id, c, fe := ParseBinary([]byte(tc.in))
		if tc.wantErr != "" {
			if fe == nil || fe.Code != CodeBadRequest || !strings.Contains(fe.Message, tc.wantErr) {
				t.Errorf("ParseBinary(%q) = %+v, want %q", tc.in, fe, tc.wantErr)
			}
			continue
		}
		if fe != nil || id != tc.id || c.Input != tc.input || string(c.Data) != tc.data || c.End != tc.end || c.Body != nil {
			t.Errorf("ParseBinary(%q) = %q %+v %v", tc.in, id, c, fe)
		}
	}
}

func FuzzParseBinary(f *testing.F) {
	for _, tc := range binaryCases {
		f.Add([]byte(tc.in))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		id, c, fe := ParseBinary(data)
		if fe != nil {
			if !json.Valid(ErrorFrame(fe.ID, fe.Code, fe.Message)) {
				t.Fatal("error frame is not JSON")
			}
			return
		}
		if id == "" || c.Input == "" || !bytes.HasSuffix(data, c.Data) {
			t.Fatalf("accepted %q as %q %+v", data, id, c)
		}
	})
}

// chunkHandler emits one payload per chunk of a sequence: the chunk's body,
// or {"input":...,"bytes":n} for a binary one; other requests finish at
// once. A chunk whose body is {"stall":true} makes it wait for the next
// chunk with a 30 ms idle limit of its own.
func chunkHandler(ctx context.Context, req *Request, emit func([]byte) error) error {
	if req.Sequence == nil {
		return nil
	}
	c := Chunk{Body: req.Body}
	for {
		p := []byte(c.Body)
		if c.Body == nil {
			p = fmt.Appendf(nil, `{"input":%q,"bytes":%d}`, c.Input, len(c.Data))
		}
		if err := emit(p); err != nil {
			return err
		}
		if c.End {
			return nil
		}
		limit := time.Duration(0)
		if string(c.Body) == `{"stall":true}` {
			limit = 30 * time.Millisecond
		}
		var err error
		if c, err = req.Sequence.Next(ctx, limit); err != nil {
			return err
		}
	}
}

func binary(t *testing.T, c *websocket.Conn, header string, data []byte) {
	t.Helper()
	if err := c.Write(t.Context(), websocket.MessageBinary, append([]byte(header+"\n"), data...)); err != nil {
		t.Fatal(err)
	}
}

// TestSessionSequences: sequences interleaved on one socket each get their
// chunks in order (text and binary), and their data and terminal frames
// under their id.
func TestSessionSequences(t *testing.T) {
	srv := newServer(t, chunkHandler, nil)
	c := dial(t, srv.url)
	const n = 10
	for i := range n {
		send(t, c, fmt.Sprintf(`{"type":"sequence.start","id":"s%d","model":"m","body":{"i":%d,"k":0}}`, i, i))
	}
	for k := 1; k <= 3; k++ {
		for i := range n {
			if i%2 == 0 {
				send(t, c, fmt.Sprintf(`{"type":"sequence.data","id":"s%d","body":{"i":%d,"k":%d}}`, i, i, k))
			} else {
				binary(t, c, fmt.Sprintf(`{"id":"s%d","input":"in%d"}`, i, k), make([]byte, k))
			}
		}
	}
	for i := range n {
		send(t, c, fmt.Sprintf(`{"type":"sequence.end","id":"s%d","body":{"i":%d,"k":4}}`, i, i))
	}
	got := map[string][]string{}
	for done := 0; done < n; {
		f, err := read(t, c)
		if err != nil {
			t.Fatal(err)
		}
		switch f.Type {
		case "data":
			if f.Seq != uint64(len(got[f.ID])) {
				t.Fatalf("%s: seq %d after %d frames", f.ID, f.Seq, len(got[f.ID]))
			}
			got[f.ID] = append(got[f.ID], string(f.Data))
		case "done":
			done++
		default:
			t.Fatalf("unexpected %+v", f)
		}
	}
	for i := range n {
		want := []string{fmt.Sprintf(`{"i":%d,"k":0}`, i)}
		for k := 1; k <= 3; k++ {
			if i%2 == 0 {
				want = append(want, fmt.Sprintf(`{"i":%d,"k":%d}`, i, k))
			} else {
				want = append(want, fmt.Sprintf(`{"input":"in%d","bytes":%d}`, k, k))
			}
		}
		want = append(want, fmt.Sprintf(`{"i":%d,"k":4}`, i))
		if g := got[fmt.Sprintf("s%d", i)]; strings.Join(g, " ") != strings.Join(want, " ") {
			t.Fatalf("s%d: got %v, want %v", i, g, want)
		}
	}
}

// TestSessionSequenceLimits: every per-socket limit ends (or refuses) the
// sequence it is about with its own code, and the socket serves on.
func TestSessionSequenceLimits(t *testing.T) {
	srv := newServer(t, chunkHandler, &Options{MaxSequences: 2, MaxChunkBytes: 16, ChunkRate: -1, SequenceQueue: 1})
	c := dial(t, srv.url)
	expect := func(want string) {
		t.Helper()
		for {
			f, err := read(t, c)
			if err != nil {
				t.Fatal(err)
			}
			if f.Type == "data" {
				continue
			}
			got := f.Type + " " + f.ID + " " + f.Reason
			if f.Error != nil {
				got = f.Type + " " + f.ID + " " + f.Error.Code + ": " + f.Error.Message
			}
			if got != want {
				t.Fatalf("got %q, want %q", got, want)
			}
			return
		}
	}
	send(t, c, `{"type":"sequence.start","id":"a","model":"m","body":{}}`)
	send(t, c, `{"type":"sequence.start","id":"b","model":"m","body":{}}`)
	send(t, c, `{"type":"sequence.start","id":"c","model":"m","body":{}}`)
	expect("error c too_many_sequences: too many open sequences on this socket (at most 2)")
	send(t, c, `{"type":"sequence.data","id":"nope","body":{}}`)
	expect("error  unknown_sequence: no open sequence nope")
	send(t, c, `{"type":"generate","id":"g","model":"m"}`)
	expect("done g final")
	binary(t, c, `{"id":"a","input":"x"}`, make([]byte, 17))
	expect("error a chunk_too_large: a chunk holds at most 16 bytes")
	send(t, c, `{"type":"sequence.end","id":"b","body":{}}`)
	expect("done b final")
	send(t, c, `{"type":"sequence.end","id":"b","body":{}}`)
	expect("error  unknown_sequence: no open sequence b")
	// A stalled sequence (its handler waits 30 ms for a chunk) ends.
	send(t, c, `{"type":"sequence.start","id":"d","model":"m","body":{"stall":true}}`)
	expect("error d sequence_idle: no chunk for 30ms: the sequence was ended")
	// A sequence.start's body is a chunk too.
	send(t, c, `{"type":"sequence.start","id":"e","model":"m","body":{"big":"0123456789"}}`)
	expect("error e chunk_too_large: a chunk holds at most 16 bytes")
	send(t, c, `{"type":"cancel","id":"nothing"}`)
	expect("error  unknown_id: no request with id nothing is running")
	send(t, c, `{"type":"sequence.start","id":"f","model":"m","body":{}}`)
	send(t, c, `{"type":"cancel","id":"f"}`)
	expect("done f cancelled")
}

func TestChunkBucket(t *testing.T) {
	t0 := time.Unix(1000, 0)
	b := chunkBucket{rate: 4}
	for i := range 4 {
		if !b.take(t0) {
			t.Fatalf("chunk %d of the first burst refused", i)
		}
	}
	if b.take(t0) || b.take(t0.Add(200*time.Millisecond)) {
		t.Fatal("a fifth chunk within a quarter second passed")
	}
	if !b.take(t0.Add(260 * time.Millisecond)) {
		t.Fatal("a token refilled after 250 ms was refused")
	}
	if !b.take(t0.Add(time.Hour)) || !b.take(t0.Add(time.Hour)) || !b.take(t0.Add(time.Hour)) || !b.take(t0.Add(time.Hour)) || b.take(t0.Add(time.Hour)) {
		t.Fatal("the bucket holds more than a second's worth")
	}
	slow := chunkBucket{rate: 0.5}
	if !slow.take(t0) || slow.take(t0.Add(time.Second)) || !slow.take(t0.Add(2*time.Second)) {
		t.Fatal("a rate below one chunk a second still allows one chunk at a time")
	}
	if none := (chunkBucket{rate: -1}); !none.take(t0) || !none.take(t0) {
		t.Fatal("a negative rate limits")
	}
}

// TestSessionChunkRate: chunks beyond ChunkRate end their sequence.
func TestSessionChunkRate(t *testing.T) {
	// One chunk a burst, then one per 100 s: the second chunk ends its
	// sequence.
	srv := newServer(t, chunkHandler, &Options{ChunkRate: 0.01})
	c := dial(t, srv.url)
	send(t, c, `{"type":"sequence.start","id":"a","model":"m","body":{}}`)
	send(t, c, `{"type":"sequence.data","id":"a","body":{}}`)
	for {
		f, err := read(t, c)
		if err != nil {
			t.Fatal(err)
		}
		if f.Type == "data" {
			continue
		}
		if f.Type != "error" || f.ID != "a" || f.Error.Code != CodeTooManyChunks {
			t.Fatalf("got %+v", f)
		}
		return
	}
}
