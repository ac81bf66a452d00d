package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
)

// wsSubprotocol is the WebSocket protocol the gateway speaks on /v1/ws.
const wsSubprotocol = "streamgate.v1"

// wsTransport runs requests as generate frames over a few long-lived
// WebSockets: perSocket requests share one socket, so conc concurrent
// requests use ceil(conc/perSocket) sockets; a request goes to the socket
// with the fewest in flight. Leaving sends a cancel frame.
type wsTransport struct {
	url     string
	wl      workload
	ctx     context.Context // bounds every socket
	cancel  context.CancelFunc
	sockets []*wsSocket
	pick    sync.Mutex // makes choosing a socket and counting on it one step
}

func newWSTransport(base string, wl workload, conc, perSocket int) *wsTransport {
	n := max((conc+perSocket-1)/perSocket, 1)
	ctx, cancel := context.WithCancel(context.Background())
	t := &wsTransport{url: "ws" + trimScheme(base) + "/v1/ws", wl: wl, ctx: ctx, cancel: cancel}
	for range n {
		t.sockets = append(t.sockets, &wsSocket{})
	}
	return t
}

// trimScheme turns "http://host" into "://host" (and https into s://host)
// so the ws scheme can be put in front.
func trimScheme(base string) string {
	if rest, ok := strings.CutPrefix(base, "http"); ok {
		return rest
	}
	return "://" + base
}

func (t *wsTransport) close() {
	t.cancel()
	for _, s := range t.sockets {
		s.mu.Lock()
		c, life := s.conn, s.life
		s.mu.Unlock()
		if c != nil {
			c.CloseNow()
			<-life.dead
		}
	}
}

// wsSocket is one WebSocket and its reader goroutine, which routes frames
// to requests by id and exits when the socket fails, closing dead.
type wsSocket struct {
	inflight atomic.Int64

	mu    sync.Mutex // guards conn, life, calls
	conn  *websocket.Conn
	life  *wsLife
	calls map[string]*wsCall
}

// wsLife is one connection's life on a wsSocket: dead closes when it
// fails, after err is set. A reconnect makes a new one, so requests of the
// old connection still read their own error.
type wsLife struct {
	dead chan struct{}
	err  error
}

type wsCall struct {
	ch   chan wsFrame
	gone chan struct{} // closed when the request stops listening
}

// wsFrame is one server frame; for data frames only id and the raw frame
// are filled in (the frame is classified as a whole).
type wsFrame struct {
	Type   string `json:"type"`
	ID     string `json:"id"`
	Reason string `json:"reason"`
	Error  *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
	raw []byte
}

var dataPrefix = []byte(`{"type":"data","id":"`)

// parseWSFrame decodes a server frame. Data frames, the bulk, take a fast
// path when they start the way the gateway writes them.
func parseWSFrame(b []byte) (wsFrame, error) {
	if rest, ok := bytes.CutPrefix(b, dataPrefix); ok {
		if i := bytes.IndexByte(rest, '"'); i > 0 && bytes.IndexByte(rest[:i], '\\') < 0 {
			return wsFrame{Type: "data", ID: string(rest[:i]), raw: b}, nil
		}
	}
	var f wsFrame
	if err := json.Unmarshal(b, &f); err != nil {
		return f, err
	}
	f.raw = b
	return f, nil
}

// socket returns the least-loaded socket, connected, with one request
// counted on it (the caller gives it back with inflight.Add(-1) once the
// server has ended the request). Choosing and counting are one step, so
// concurrent callers never put more than ⌈c / per-socket⌉ on a socket.
func (t *wsTransport) socket() (*wsSocket, error) {
	t.pick.Lock()
	best := t.sockets[0]
	for _, s := range t.sockets[1:] {
		if s.inflight.Load() < best.inflight.Load() {
			best = s
		}
	}
	best.inflight.Add(1)
	t.pick.Unlock()
	s, err := best.connect(t)
	if err != nil {
		best.inflight.Add(-1)
	}
	return s, err
}

func (best *wsSocket) connect(t *wsTransport) (*wsSocket, error) {
	best.mu.Lock()
	defer best.mu.Unlock()
	if best.conn != nil {
		select {
		case <-best.life.dead:
		default:
			return best, nil
		}
	}
	ctx, cancel := context.WithTimeout(t.ctx, 10*time.Second)
	defer cancel()
	c, resp, err := websocket.Dial(ctx, t.url, &websocket.DialOptions{Subprotocols: []string{wsSubprotocol}, HTTPClient: newHTTPClient(1, t.wl.APIKey)})
	if err != nil {
		if resp != nil {
			return nil, errKindf(fmt.Sprintf("http_%d", resp.StatusCode), "websocket dial: %v", err)
		}
		return nil, errKind("connect", err)
	}
	if c.Subprotocol() != wsSubprotocol {
		c.CloseNow()
		return nil, errKindf("protocol", "server did not agree to %s", wsSubprotocol)
	}
	c.SetReadLimit(16 << 20)
	best.conn, best.life, best.calls = c, &wsLife{dead: make(chan struct{})}, map[string]*wsCall{}
	go best.read(t.ctx, c, best.life) // ends when the socket fails; close waits on life.dead
	return best, nil
}

func (s *wsSocket) read(ctx context.Context, c *websocket.Conn, life *wsLife) {
	fail := func(err error) {
		life.err = err
		close(life.dead)
		c.CloseNow()
	}
	for {
		_, b, err := c.Read(ctx)
		if err != nil {
			fail(err)
			return
		}
		f, err := parseWSFrame(b)
		if err != nil {
			fail(fmt.Errorf("bad frame: %w", err))
			return
		}
		s.mu.Lock()
		call := s.calls[f.ID]
		s.mu.Unlock()
		if call == nil {
			continue // a request already given up, or an error naming no id
		}
		select {
		case call.ch <- f:
		case <-call.gone:
		}
	}
}

func (t *wsTransport) write(s *wsSocket, frame []byte) error {
	ctx, cancel := context.WithTimeout(t.ctx, 10*time.Second)
	defer cancel()
	s.mu.Lock()
	c := s.conn
	s.mu.Unlock()
	return c.Write(ctx, websocket.MessageText, frame)
}

// register routes the frames of request id to the returned call until
// unregister; life.dead closes if the socket's connection fails.
func (s *wsSocket) register(id string) (call *wsCall, life *wsLife, unregister func()) {
	call = &wsCall{ch: make(chan wsFrame, 64), gone: make(chan struct{})}
	s.mu.Lock()
	life = s.life
	s.calls[id] = call
	s.mu.Unlock()
	return call, life, func() {
		s.mu.Lock()
		delete(s.calls, id)
		s.mu.Unlock()
		close(call.gone)
	}
}

func (t *wsTransport) do(ctx context.Context, serial int32, st *stream) error {
	s, err := t.socket()
	if err != nil {
		return err
	}
	defer s.inflight.Add(-1)
	id := "r" + strconv.FormatInt(int64(serial), 10)
	call, life, unregister := s.register(id)
	defer unregister()
	frame, _ := json.Marshal(map[string]any{"type": "generate", "id": id, "model": t.wl.Model, "body": json.RawMessage(t.wl.generateBody(serial))})
	st.begin()
	if err := t.write(s, frame); err != nil {
		return errKind("ws_closed", err)
	}
	text := t.wl.textModel()
	left := false
	var failed error            // an error event came in a data frame
	var giveUp <-chan time.Time // after leaving: how long to wait for the terminal frame
	for {
		select {
		case <-giveUp:
			if failed != nil {
				return failed
			}
			return errClientCancel
		case f := <-call.ch:
			switch f.Type {
			case "data":
				if left {
					continue
				}
				kind, msg := classifyGenerate(f.raw, text)
				if kind == evError {
					// The request's slot is the server's until its
					// terminal frame: wait for it (briefly).
					failed = errKindf("error_event", "%s", msg)
					left = true
					giveUp = time.After(5 * time.Second)
					continue
				}
				if kind == evResponse && st.response() {
					left = true
					giveUp = time.After(5 * time.Second)
					cancel, _ := json.Marshal(map[string]string{"type": "cancel", "id": id})
					if err := t.write(s, cancel); err != nil {
						return errKind("ws_closed", err)
					}
				}
			case "done":
				if failed != nil {
					return failed
				}
				if left {
					return errClientCancel
				}
				return nil
			case "error":
				if failed != nil {
					return failed
				}
				if left {
					return errClientCancel
				}
				if f.Error != nil {
					return errKindf("ws_"+f.Error.Code, "%s", f.Error.Message)
				}
				return errKindf("ws_error", "%s", f.raw)
			}
		case <-life.dead:
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return errKind("ws_closed", life.err)
		case <-ctx.Done():
			// The run is over: tell the server, without waiting.
			cancel, _ := json.Marshal(map[string]string{"type": "cancel", "id": id})
			t.write(s, cancel)
			return ctx.Err()
		}
	}
}
