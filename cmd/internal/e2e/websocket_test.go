package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/coder/websocket"
	"github.com/streamgate/streamgate/gateway/ws"

	"github.com/streamgate/streamgate/gateway"
)

type wsFrame struct {
	Type   string          `json:"type"`
	ID     string          `json:"id"`
	Seq    uint64          `json:"seq"`
	Data   json.RawMessage `json:"data"`
	Reason string          `json:"reason"`
	Error  *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func (s *testStack) dialWS(t *testing.T) *websocket.Conn {
	t.Helper()
	c, resp, err := websocket.Dial(t.Context(), "ws"+strings.TrimPrefix(s.url, "http")+"/v1/ws",
		&websocket.DialOptions{Subprotocols: []string{ws.Subprotocol}})
	if err != nil {
		t.Fatal(err)
	}
	if c.Subprotocol() != ws.Subprotocol || resp.StatusCode != 101 {
		t.Fatalf("subprotocol %q status %d", c.Subprotocol(), resp.StatusCode)
	}
	c.SetReadLimit(1 << 22)
	t.Cleanup(func() { c.CloseNow() })
	return c
}

func wsSend(t *testing.T, c *websocket.Conn, v string) {
	t.Helper()
	if err := c.Write(t.Context(), websocket.MessageText, []byte(v)); err != nil {
		t.Fatal(err)
	}
}

// wsReadToEnd returns the frames c receives up to the first that is not
// data (a request's terminal frame), raw.
func wsReadToEnd(t *testing.T, c *websocket.Conn) []string {
	t.Helper()
	var frames []string
	for {
		f, raw, err := wsRead(t, c)
		if err != nil {
			t.Fatal(err)
		}
		frames = append(frames, string(raw))
		if f.Type != "data" {
			return frames
		}
	}
}

func wsRead(t *testing.T, c *websocket.Conn) (wsFrame, []byte, error) {
	t.Helper()
	_, data, err := c.Read(t.Context())
	if err != nil {
		return wsFrame{}, nil, err
	}
	loadSpec(t).checkWSFrame(t, data)
	var f wsFrame
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatalf("frame %s: %v", data, err)
	}
	return f, data, nil
}

// Fifty requests of every kind run at once on one socket; every fifth is
// a long one that the client cancels. Each id gets its data in order and
// exactly one terminal frame, and the cancelled ones stop in the engine.
func TestWebSocketFiftyRequestsSomeCancelled(t *testing.T) {
	s := newStack(t, &gateway.Options{Now: fixedNow})
	c := s.dialWS(t)
	const n = 50
	want := map[string]string{}
	for i := range n {
		id := fmt.Sprintf("r%02d", i)
		var frame string
		switch i % 5 {
		case 0:
			frame = `{"type":"generate","id":"` + id + `","model":"repeat_int32","body":{"IN":[1,2,3],"DELAY":[1,1,1],"WAIT":0}}`
			want[id] = "done/final/3"
		case 1:
			frame = `{"type":"chat.completions","id":"` + id + `","body":{"model":"echo","messages":[{"role":"user","content":"a b"}],"stream":true,"stream_options":{"include_usage":true}}}`
			want[id] = "done/final/7" // role, 4 words ("user: a b assistant:"), finish, usage
		case 2:
			frame = `{"type":"completions","id":"` + id + `","body":{"model":"echo","prompt":"x y z","max_tokens":2}}`
			want[id] = "done/final/3" // 2 words, finish
		case 3:
			frame = `{"type":"generate","id":"` + id + `","model":"square_int32","body":{"IN":4}}`
			want[id] = "done/final/4"
		case 4:
			// 50000 words at 20ms: only the cancel ends it.
			frame = `{"type":"completions","id":"` + id + `","body":{"model":"echo_slow","prompt":"` + words(50000) + `","max_tokens":50000}}`
			want[id] = "done/cancelled"
		}
		loadSpec(t).checkWSClientFrame(t, []byte(frame))
		wsSend(t, c, frame)
	}
	got := map[string]string{}
	counts := map[string]int{}
	cancelled := false
	for len(got) < n {
		f, raw, err := wsRead(t, c)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := want[f.ID]; !ok {
			t.Fatalf("frame for unknown id: %s", raw)
		}
		if _, ok := got[f.ID]; ok {
			t.Fatalf("frame after the terminal of %s: %s", f.ID, raw)
		}
		switch f.Type {
		case "data":
			if f.Seq != uint64(counts[f.ID]) {
				t.Fatalf("%s: seq %d after %d frames", f.ID, f.Seq, counts[f.ID])
			}
			counts[f.ID]++
			if strings.Contains(string(f.Data), `"error"`) {
				t.Fatalf("error in data: %s", raw)
			}
		case "done":
			got[f.ID] = "done/" + f.Reason
			if f.Reason == "final" {
				got[f.ID] += fmt.Sprintf("/%d", counts[f.ID])
			}
		case "error":
			t.Fatalf("error frame: %s", raw)
		}
		// Cancel the long ones once the short ones are done.
		if !cancelled && len(got) == n-n/5 {
			cancelled = true
			for i := 4; i < n; i += 5 {
				wsSend(t, c, fmt.Sprintf(`{"type":"cancel","id":"r%02d"}`, i))
			}
		}
	}
	for id, w := range want {
		if got[id] != w {
			t.Errorf("%s ended %s, want %s", id, got[id], w)
		}
	}
	waitFor(t, "cancelled requests to stop in the engine", func() bool { return s.eng.InFlight() == 0 })

	// The socket still works, and ids may be reused after their terminal.
	wsSend(t, c, `{"type":"generate","id":"r00","model":"square_int32","body":{"IN":1}}`)
	if f, _, err := wsRead(t, c); err != nil || f.Type != "data" || string(f.Data) != `{"model_name":"square_int32","model_version":"1","OUT":1}` {
		t.Fatalf("reuse: %+v %v", f, err)
	}
	if f, _, err := wsRead(t, c); err != nil || f.Type != "done" || f.Reason != "final" {
		t.Fatalf("reuse terminal: %+v %v", f, err)
	}
	c.Close(websocket.StatusNormalClosure, "")
}

func TestWebSocketErrorsScopedToID(t *testing.T) {
	s := newStack(t, nil)
	c := s.dialWS(t)
	for _, tc := range []struct{ frame, want string }{
		{`{"type":"generate","id":"e1","model":"nope","body":{}}`, `{"type":"error","id":"e1","error":{"code":"not_found","message":"Request for unknown model: 'nope' is not found"}}`},
		{`{"type":"chat.completions","id":"e2","body":{"model":"echo","messages":[],"n":1}}`, `{"type":"error","id":"e2","error":{"code":"invalid_value","message":"Invalid value for 'messages': it must contain at least one message."}}`},
		{`{"type":"generate","id":"e3","model":"repeat_int32","body":{"IN":[1],"DELAY":[1,2],"WAIT":0}}`, `{"type":"error","id":"e3","error":{"code":"model_error","message":"expected IN and DELAY shape to match, got [1] and [2]"}}`},
		{`{"type":"completions","id":"e4","body":{"model":"echo","prompt":"x","tools":[1]}}`, `{"type":"error","id":"e4","error":{"code":"unknown_parameter","message":"Unrecognized request argument supplied: tools"}}`},
		{`not json`, `{"type":"error","error":{"code":"bad_request","message":"invalid frame: failed to parse the request JSON buffer: invalid character 'o' in literal null (expecting 'u') at line 1, column 2 (offset 1)"}}`},
		// A cancel of an id that is not running is refused, naming the id
		// inside "error": no terminal for an id that may have had one.
		{`{"type":"cancel","id":"e9"}`, `{"type":"error","error":{"code":"unknown_id","message":"no request with id e9 is running","id":"e9"}}`},
	} {
		wsSend(t, c, tc.frame)
		_, raw, err := wsRead(t, c)
		if err != nil || string(raw) != tc.want {
			t.Errorf("%s\n got %s %v\nwant %s", tc.frame, raw, err, tc.want)
		}
	}
	// A duplicate of a running id is refused the same way: the running
	// request goes on to its own terminal.
	wsSend(t, c, `{"type":"generate","id":"d1","model":"repeat_int32","body":{"IN":[1,2],"DELAY":[0,300],"WAIT":0}}`)
	if f, raw, err := wsRead(t, c); err != nil || f.Type != "data" || f.ID != "d1" {
		t.Fatalf("d1: %s %v", raw, err)
	}
	wsSend(t, c, `{"type":"generate","id":"d1","model":"square_int32","body":{"IN":1}}`)
	if _, raw, err := wsRead(t, c); err != nil || string(raw) != `{"type":"error","error":{"code":"duplicate_id","message":"request id d1 is already active","id":"d1"}}` {
		t.Fatalf("duplicate: %s %v", raw, err)
	}
	for _, want := range []string{"data", "done"} {
		if f, raw, err := wsRead(t, c); err != nil || f.Type != want || f.ID != "d1" {
			t.Fatalf("d1 after its duplicate: %s %v, want %s", raw, err, want)
		}
	}
	c.Close(websocket.StatusNormalClosure, "")
}

func TestWebSocketRefusesOtherSubprotocols(t *testing.T) {
	s := newStack(t, nil)
	c, _, err := websocket.Dial(t.Context(), "ws"+strings.TrimPrefix(s.url, "http")+"/v1/ws", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	// The socket is closed at once, with the reason, before the client
	// sends anything: a browser page sees both in its close event, which
	// a refused handshake would not give it.
	_, _, err = c.Read(t.Context())
	var ce websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != websocket.StatusPolicyViolation || ce.Reason != "the client must speak streamgate.v1" {
		t.Fatalf("read: %v, want close 1008 naming the subprotocol", err)
	}
}

// Requests that wait for their responses on a socket (without a goroutine
// of their own in the gateway) finish in order when the server drains
// gracefully: every one completes, then the socket closes with 1001 and
// Drain returns.
func TestWebSocketDrainWithWaitingRequests(t *testing.T) {
	s := newStack(t, nil)
	c := s.dialWS(t)
	const n = 40
	for i := range n {
		wsSend(t, c, fmt.Sprintf(`{"type":"generate","id":"w%02d","model":"repeat_int32","body":{"IN":[%d,%d,%d],"DELAY":[0,200,200],"WAIT":0}}`, i, 10*i, 10*i+1, 10*i+2))
	}
	counts := map[string]int{}
	done := 0
	drained := make(chan error, 1)
	for draining := false; ; {
		if !draining && len(counts) == n { // every request has started and waits for more
			draining = true
			go func() { drained <- s.gw.Drain(t.Context()) }()
		}
		f, raw, err := wsRead(t, c)
		if err != nil {
			if websocket.CloseStatus(err) != websocket.StatusGoingAway {
				t.Fatalf("socket closed with %v, want 1001", err)
			}
			break
		}
		switch f.Type {
		case "data":
			var i int
			fmt.Sscanf(f.ID, "w%d", &i)
			want := fmt.Sprintf(`{"model_name":"repeat_int32","model_version":"1","OUT":%d,"IDX":%d}`, 10*i+counts[f.ID], counts[f.ID])
			if f.Seq != uint64(counts[f.ID]) || string(f.Data) != want {
				t.Fatalf("%s: frame %s after %d, want data %s", f.ID, raw, counts[f.ID], want)
			}
			counts[f.ID]++
		case "done":
			if f.Reason != "final" || counts[f.ID] != 3 {
				t.Fatalf("%s ended %s after %d frames", f.ID, raw, counts[f.ID])
			}
			done++
		default:
			t.Fatalf("frame %s", raw)
		}
	}
	if done != n {
		t.Fatalf("%d of %d requests completed before the socket closed", done, n)
	}
	if err := <-drained; err != nil {
		t.Fatalf("Drain = %v", err)
	}
}
