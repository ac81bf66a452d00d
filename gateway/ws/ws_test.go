package ws

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var frameCases = []struct {
	in      string
	id      string
	code    string
	wantErr string
}{
	{`{"type":"generate","id":"a1","model":"m","body":{"IN":[1]}}`, "", "", ""},
	{`{"type":"generate","id":"a1","model":"m"}`, "", "", ""},
	{`{"type":"chat.completions","id":"a2","body":{"model":"echo"}}`, "", "", ""},
	{`{"type":"completions","id":"a3","body":{}}`, "", "", ""},
	{`{"type":"cancel","id":"a1"}`, "", "", ""},
	{`{"type":"completions","id":"a3","resumable":true,"body":{}}`, "", "", ""},
	{`{"type":"generate","id":"a1","model":"m","resumable":false}`, "", "", ""},
	{`{"type":"resume","id":"r1","stream":"s1","after":20}`, "", "", ""},
	{`{"type":"resume","id":"r1","stream":"s1"}`, "", "", ""},
	{`{"type":"resume","id":"r1"}`, "r1", CodeBadRequest, "needs 'stream'"},
	{`{"type":"resume","id":"r1","stream":7}`, "r1", CodeBadRequest, "needs 'stream'"},
	{`{"type":"resume","id":"r1","stream":"s1","after":-1}`, "r1", CodeBadRequest, "'after' must be a whole number"},
	{`{"type":"resume","id":"r1","stream":"s1","after":1.5}`, "r1", CodeBadRequest, "'after' must be a whole number"},
	{`{"type":"resume","id":"r1","stream":"s1","body":{}}`, "r1", CodeBadRequest, "takes no body"},
	{`{"type":"resume","id":"r1","stream":"s1","model":"m"}`, "r1", CodeBadRequest, "takes no model"},
	{`{"type":"cancel","id":"a1","resumable":true}`, "a1", CodeBadRequest, "'resumable' is for"},
	{`{"type":"generate","id":"a1","model":"m","resumable":"yes"}`, "a1", CodeBadRequest, "'resumable' must be a boolean"},
	{`{"type":"generate","id":"a1","model":"m","stream":"s1"}`, "a1", CodeBadRequest, "'stream' is for resume frames"},
	{`{"type":"generate","model":"m"}`, "", CodeBadRequest, "needs an 'id'"},
	{`{"type":"generate","id":7}`, "", CodeBadRequest, "'id' must be a string"},
	{`{"type":"nope","id":"x"}`, "x", CodeBadRequest, "unknown frame type 'nope'"},
	{`{"id":"x"}`, "x", CodeBadRequest, "needs a 'type'"},
	{`{"type":"generate","id":"x"}`, "x", CodeBadRequest, "needs 'model'"},
	{`{"type":"chat.completions","id":"x"}`, "x", CodeBadRequest, "needs a 'body'"},
	{`{"type":"chat.completions","id":"x","model":"m","body":{}}`, "x", CodeBadRequest, "names its model in 'body'"},
	{`{"type":"generate","id":"x","model":"m","body":[1]}`, "x", CodeBadRequest, "'body' must be an object"},
	{`{"type":"generate","id":"x","model":"m","extra":1}`, "x", CodeBadRequest, "unknown frame field 'extra'"},
	{`{"type":"generate",`, "", CodeBadRequest, "invalid frame"},
	{`[]`, "", CodeBadRequest, "invalid frame"},
}

func TestParseFrame(t *testing.T) {
	for _, tc := range frameCases {
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

func FuzzParseFrame(f *testing.F) {
	for _, tc := range frameCases {
		f.Add([]byte(tc.in))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, fe := ParseFrame(data)
		if (r == nil) == (fe == nil) {
			t.Fatalf("ParseFrame gave %v and %v", r, fe)
		}
		if fe != nil && !json.Valid(ErrorFrame(fe.ID, fe.Code, fe.Message)) {
			t.Fatal("error frame is not JSON")
		}
		if r != nil && r.ID == "" {
			t.Fatal("accepted a frame without id")
		}
		if r != nil && (r.Type == TypeResume) != (r.Stream != "") {
			t.Fatalf("a %s frame with stream %q", r.Type, r.Stream)
		}
	})
}

func TestServerFrames(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{string(DataFrame("a\"1", 3, []byte(`{"x":1}`))), `{"type":"data","id":"a\"1","seq":3,"data":{"x":1}}`},
		{string(DoneFrame("a1", ReasonFinal)), `{"type":"done","id":"a1","reason":"final"}`},
		{string(AppendStreamDataFrame(nil, "a1", 0, "s\"1", []byte(`{"x":1}`))), `{"type":"data","id":"a1","seq":0,"stream":"s\"1","data":{"x":1}}`},
		{string(ErrorFrame("a1", "not_found", "no model")), `{"type":"error","id":"a1","error":{"code":"not_found","message":"no model"}}`},
		{string(ErrorFrame("", "bad_request", "x")), `{"type":"error","error":{"code":"bad_request","message":"x"}}`},
		{string(RefusalFrame("a\"1", "duplicate_id", "x")), `{"type":"error","error":{"code":"duplicate_id","message":"x","id":"a\"1"}}`},
	} {
		if tc.got != tc.want {
			t.Errorf("got %s, want %s", tc.got, tc.want)
		}
	}
}

// server runs Sessions for h behind a real loopback listener.
type server struct {
	url      string
	sessions chan *Session
	// wg counts the sessions running; mu orders their Add before the
	// cleanup's Wait (nothing else does: the client's reads are no
	// synchronization the race detector sees), closed refuses later ones.
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

func newServer(t *testing.T, h Handler, opts *Options) *server {
	return newServerBuffer(t, h, opts, 0)
}

// newServerBuffer is newServer whose sockets' send buffers are sndbuf
// bytes (0: the system's).
func newServerBuffer(t *testing.T, h Handler, opts *Options, sndbuf int) *server {
	s := &server{sessions: make(chan *Session, 16)}
	hs := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{Subprotocol}})
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.CloseNow()
			return
		}
		s.wg.Add(1)
		s.mu.Unlock()
		defer s.wg.Done()
		sess := NewSession(c, h, opts)
		s.sessions <- sess
		sess.Run(context.Background()) // ends with the socket
	}))
	if sndbuf > 0 {
		hs.Config.ConnState = func(c net.Conn, st http.ConnState) {
			if st == http.StateNew {
				c.(*net.TCPConn).SetWriteBuffer(sndbuf)
			}
		}
	}
	hs.Start()
	s.url = "ws" + strings.TrimPrefix(hs.URL, "http")
	t.Cleanup(func() {
		hs.Close()
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

func dial(t *testing.T, url string) *websocket.Conn {
	t.Helper()
	c, _, err := websocket.Dial(t.Context(), url, &websocket.DialOptions{Subprotocols: []string{Subprotocol}})
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadLimit(1 << 24)
	t.Cleanup(func() { c.CloseNow() })
	return c
}

type frame struct {
	Type   string          `json:"type"`
	ID     string          `json:"id"`
	Seq    uint64          `json:"seq"`
	Data   json.RawMessage `json:"data"`
	Reason string          `json:"reason"`
	Error  *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		ID      string `json:"id"` // refusals: the id the refused frame named
	} `json:"error"`
}

func send(t *testing.T, c *websocket.Conn, s string) {
	t.Helper()
	if err := c.Write(t.Context(), websocket.MessageText, []byte(s)); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, c *websocket.Conn) (frame, error) {
	t.Helper()
	_, data, err := c.Read(t.Context())
	if err != nil {
		return frame{}, err
	}
	var f frame
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatalf("bad frame %s: %v", data, err)
	}
	return f, nil
}

// countHandler emits n data payloads per request, n from the body; ids
// starting with "hold" wait for cancellation instead of finishing.
func countHandler(ctx context.Context, req *Request, emit func([]byte) error) error {
	var body struct{ N int }
	json.Unmarshal(req.Body, &body)
	for i := range body.N {
		if err := emit([]byte(fmt.Sprintf(`{"i":%d}`, i))); err != nil {
			return err
		}
	}
	if strings.HasPrefix(req.ID, "hold") {
		<-ctx.Done()
		return ctx.Err()
	}
	if strings.HasPrefix(req.ID, "fail") {
		return errors.New("boom")
	}
	return nil
}

// later is h as a Handler that returns at once: each request goes on
// after it (Request.Later) on a goroutine of its own, as the gateway's
// requests that wait without one go on in whatever goroutine their
// responses arrive on.
func later(h Handler) Handler {
	return func(ctx context.Context, req *Request, emit func([]byte) error) error {
		end := req.Later()
		go func() { end(h(ctx, req, emit)) }()
		return nil
	}
}

// handlers are countHandler ending its requests as it returns and after
// it returned (later).
var handlers = []struct {
	name string
	h    Handler
}{{"returns", countHandler}, {"later", later(countHandler)}}

func TestSessionManyRequestsSomeCancelled(t *testing.T) {
	for _, h := range handlers {
		t.Run(h.name, func(t *testing.T) { testManyRequestsSomeCancelled(t, h.h) })
	}
}

func testManyRequestsSomeCancelled(t *testing.T, h Handler) {
	srv := newServer(t, h, &Options{ErrorInfo: func(err error) (string, string) { return "model_error", err.Error() }})
	c := dial(t, srv.url)
	const n = 50
	for i := range n {
		id := fmt.Sprintf("r%d", i)
		switch i % 5 {
		case 0:
			id = fmt.Sprintf("hold%d", i)
		case 1:
			id = fmt.Sprintf("fail%d", i)
		}
		send(t, c, fmt.Sprintf(`{"type":"generate","id":%q,"model":"m","body":{"N":%d}}`, id, i%7))
	}
	for i := 0; i < n; i += 5 {
		send(t, c, fmt.Sprintf(`{"type":"cancel","id":"hold%d"}`, i))
	}
	send(t, c, `{"type":"cancel","id":"unknown"}`)
	seqs := map[string]uint64{}
	terminals := map[string]frame{}
	refused := 0
	for len(terminals) < n || refused == 0 {
		f, err := read(t, c)
		if err != nil {
			t.Fatal(err)
		}
		if f.ID == "" { // a refusal, not a terminal
			if f.Type != "error" || f.Error.Code != CodeUnknownID || f.Error.ID != "unknown" || refused > 0 {
				t.Fatalf("unexpected frame %+v", f)
			}
			refused++
			continue
		}
		if _, done := terminals[f.ID]; done {
			t.Fatalf("frame after terminal for %s: %+v", f.ID, f)
		}
		switch f.Type {
		case "data":
			if f.Seq != seqs[f.ID] {
				t.Fatalf("%s: seq %d, want %d", f.ID, f.Seq, seqs[f.ID])
			}
			seqs[f.ID]++
		case "done", "error":
			terminals[f.ID] = f
		}
	}
	for id, f := range terminals {
		var want string
		switch {
		case strings.HasPrefix(id, "hold"):
			want = "done/cancelled"
		case strings.HasPrefix(id, "fail"):
			want = "error/model_error"
		default:
			want = "done/final"
		}
		got := f.Type + "/" + f.Reason
		if f.Error != nil {
			got = f.Type + "/" + f.Error.Code
		}
		if got != want {
			t.Errorf("%s ended %s, want %s", id, got, want)
		}
	}
	c.Close(websocket.StatusNormalClosure, "")
}

func TestSessionLimitsAndBadFrames(t *testing.T) {
	srv := newServer(t, countHandler, &Options{MaxInFlight: 2})
	c := dial(t, srv.url)
	send(t, c, `{"type":"generate","id":"hold1","model":"m"}`)
	send(t, c, `{"type":"generate","id":"hold1","model":"m"}`)
	send(t, c, `{"type":"generate","id":"hold2","model":"m"}`)
	send(t, c, `{"type":"generate","id":"x3","model":"m"}`)
	send(t, c, `{"type":"generate","model":"m"}`)
	send(t, c, `{"type":"bogus","id":"hold1"}`)
	if err := c.Write(t.Context(), websocket.MessageBinary, []byte("{}")); err != nil {
		t.Fatal(err)
	}
	want := []string{
		`error  duplicate_id(hold1) request id hold1 is already active`,
		`error x3 too_many_requests() too many requests in flight on this socket`,
		`error  bad_request() frame needs an 'id': a non-empty string of at most 256 bytes`,
		`error  bad_request(hold1) request hold1: unknown frame type 'bogus'`,
		// Binary frames carry sequence chunks, after a header.
		`error  bad_request() a binary frame starts with a JSON header of at most 1024 bytes and a newline`,
	}
	for _, w := range want {
		f, err := read(t, c)
		if err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprintf("%s %s %s(%s) %s", f.Type, f.ID, f.Error.Code, f.Error.ID, f.Error.Message); got != w {
			t.Fatalf("got %q, want %q", got, w)
		}
	}
	// A frame over the read limit closes the socket with 1009.
	big := `{"type":"cancel","id":"` + strings.Repeat("x", 1<<20) + `"}`
	c.Write(t.Context(), websocket.MessageText, []byte(big))
	for {
		if _, err := read(t, c); err != nil {
			if websocket.CloseStatus(err) != websocket.StatusMessageTooBig {
				t.Fatalf("closed with %v, want 1009", err)
			}
			break
		}
	}
}

func TestSessionDrain(t *testing.T) {
	for _, h := range handlers {
		t.Run(h.name, func(t *testing.T) { testDrain(t, h.h) })
	}
}

func testDrain(t *testing.T, h Handler) {
	srv := newServer(t, h, nil)
	idle := dial(t, srv.url)
	busy := dial(t, srv.url)
	s1, s2 := <-srv.sessions, <-srv.sessions
	send(t, busy, `{"type":"generate","id":"hold","model":"m","body":{"N":1}}`)
	if f, err := read(t, busy); err != nil || f.Type != "data" {
		t.Fatalf("first frame %+v %v", f, err)
	}
	s1.Drain()
	s2.Drain()
	// The idle socket closes at once (whichever session it is).
	if _, err := read(t, idle); websocket.CloseStatus(err) != websocket.StatusGoingAway {
		t.Fatalf("idle socket: %v, want 1001", err)
	}
	send(t, busy, `{"type":"generate","id":"late","model":"m"}`)
	if f, err := read(t, busy); err != nil || f.Type != "error" || f.Error.Code != CodeUnavailable {
		t.Fatalf("late request: %+v %v", f, err)
	}
	send(t, busy, `{"type":"cancel","id":"hold"}`)
	if f, err := read(t, busy); err != nil || f.Type != "done" || f.Reason != ReasonCancelled {
		t.Fatalf("terminal: %+v %v", f, err)
	}
	if _, err := read(t, busy); websocket.CloseStatus(err) != websocket.StatusGoingAway {
		t.Fatalf("busy socket after its last request: %v, want 1001", err)
	}
}

func TestSessionStopCancelsRequests(t *testing.T) {
	t.Run("returns", func(t *testing.T) { testStopCancels(t, false) })
	t.Run("later", func(t *testing.T) { testStopCancels(t, true) })
}

func testStopCancels(t *testing.T, useLater bool) {
	started := make(chan struct{})
	ended := make(chan error, 1)
	h := func(ctx context.Context, req *Request, emit func([]byte) error) error {
		close(started)
		<-ctx.Done()
		ended <- ctx.Err()
		return ctx.Err()
	}
	if useLater {
		h = later(h)
	}
	srv := newServer(t, h, nil)
	c := dial(t, srv.url)
	send(t, c, `{"type":"generate","id":"a","model":"m"}`)
	<-started
	(<-srv.sessions).Stop()
	if _, err := read(t, c); websocket.CloseStatus(err) != websocket.StatusGoingAway {
		t.Fatalf("read after Stop: %v", err)
	}
	if err := <-ended; err == nil {
		t.Fatal("request not cancelled")
	}
}

func TestSessionSlowReaderClosed(t *testing.T) {
	stalled := make(chan error, 1)
	payload := []byte(`"` + strings.Repeat("x", 64<<10) + `"`)
	h := func(ctx context.Context, req *Request, emit func([]byte) error) error {
		for {
			if err := emit(payload); err != nil {
				stalled <- err
				return err
			}
		}
	}
	srv := newServer(t, h, &Options{QueueBytes: 256 << 10})
	c := dial(t, srv.url)
	send(t, c, `{"type":"generate","id":"a","model":"m"}`)
	if err := <-stalled; !errors.Is(err, errSlow) {
		t.Fatalf("emit ended with %v", err)
	}
	for {
		_, _, err := c.Read(t.Context())
		if err != nil {
			if websocket.CloseStatus(err) != websocket.StatusPolicyViolation {
				t.Fatalf("closed with %v, want 1008", err)
			}
			return
		}
	}
}

// A peer that never answers pings is dropped.
func TestSessionPingTimeout(t *testing.T) {
	srv := newServer(t, countHandler, &Options{PingInterval: 20 * time.Millisecond, PingTimeout: 20 * time.Millisecond})
	c := dial(t, srv.url) // never reads, so never answers a ping
	<-srv.sessions
	srv.wg.Wait() // the session ended on its own
	if _, _, err := c.Read(t.Context()); err == nil {
		t.Fatal("socket still open")
	}
}

// TestSessionSlotFreeAtTerminal: a client that keeps exactly MaxInFlight
// requests running, starting a new one the moment it reads a terminal
// frame (done or error), is never refused: the slot is free before the
// terminal frame is queued.
func TestSessionSlotFreeAtTerminal(t *testing.T) {
	const limit, total = 4, 400
	srv := newServer(t, countHandler, &Options{MaxInFlight: limit, ErrorInfo: func(err error) (string, string) { return "model_error", err.Error() }})
	c := dial(t, srv.url)
	start := func(i int) {
		id := fmt.Sprintf("r%d", i)
		if i%3 == 0 {
			id = fmt.Sprintf("fail%d", i)
		}
		send(t, c, fmt.Sprintf(`{"type":"generate","id":%q,"model":"m","body":{"N":%d}}`, id, i%4))
	}
	started := 0
	for ; started < limit; started++ {
		start(started)
	}
	for ended := 0; ended < total; {
		f, err := read(t, c)
		if err != nil {
			t.Fatal(err)
		}
		if f.Type == "data" {
			continue
		}
		if f.Error != nil && f.Error.Code != "model_error" {
			t.Fatalf("request %d: %s %s", ended, f.Error.Code, f.Error.Message)
		}
		ended++
		if started < total {
			start(started)
			started++
		}
	}
	c.Close(websocket.StatusNormalClosure, "")
}

// A text frame that is not UTF-8 fails the connection with 1007 (RFC 6455
// section 8.1), requests on the socket or not.
func TestSessionInvalidUTF8Closes(t *testing.T) {
	srv := newServer(t, func(ctx context.Context, req *Request, emit func([]byte) error) error { return nil }, nil)
	c := dial(t, srv.url)
	if err := c.Write(t.Context(), websocket.MessageText, []byte("{\"type\":\"cancel\",\"id\":\"\xff\"}")); err != nil {
		t.Fatal(err)
	}
	_, _, err := c.Read(t.Context())
	if websocket.CloseStatus(err) != websocket.StatusInvalidFramePayloadData {
		t.Errorf("after a text frame that is not UTF-8: %v, want close 1007", err)
	}
}

// TestSessionOrderMixedWrites: frames of many requests sent at once
// (a small socket buffer, frames of every header size, coder's pings
// and pongs between them) reach the client whole and in each request's
// order.
func TestSessionOrderMixedWrites(t *testing.T) {
	const requests, frames = 8, 30
	sizes := []int{10, 200, 70 << 10}
	h := later(func(ctx context.Context, req *Request, emit func([]byte) error) error {
		for i := range frames {
			if err := emit(fmt.Appendf(nil, `{"i":%d,"pad":"%s"}`, i, strings.Repeat("y", sizes[i%len(sizes)]))); err != nil {
				return err
			}
		}
		return nil
	})
	srv := newServerBuffer(t, h, &Options{QueueBytes: 64 << 20, PingInterval: time.Millisecond, PingTimeout: time.Minute}, 8<<10)
	c := dial(t, srv.url) // its reads check every frame, and answer the pings
	for r := range requests {
		send(t, c, fmt.Sprintf(`{"type":"generate","id":"r%d","model":"m"}`, r))
	}
	next := map[string]int{}
	for done := 0; done < requests; {
		f, err := read(t, c)
		if err != nil {
			t.Fatal(err)
		}
		switch f.Type {
		case "data":
			var d struct {
				I   int
				Pad string
			}
			if err := json.Unmarshal(f.Data, &d); err != nil {
				t.Fatal(err)
			}
			if d.I != next[f.ID] || len(d.Pad) != sizes[d.I%len(sizes)] {
				t.Fatalf("%s: frame %d (%d bytes of padding), want frame %d", f.ID, d.I, len(d.Pad), next[f.ID])
			}
			next[f.ID]++
		case "done":
			if next[f.ID] != frames {
				t.Fatalf("%s done after %d frames, want %d", f.ID, next[f.ID], frames)
			}
			done++
		default:
			t.Fatalf("unexpected frame %+v", f)
		}
	}
}
