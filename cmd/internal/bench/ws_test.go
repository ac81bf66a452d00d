package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
)

func TestParseWSFrame(t *testing.T) {
	tests := []struct {
		in        string
		typ, id   string
		code, rsn string
		wantErr   bool
	}{
		{`{"type":"data","id":"r1","seq":0,"data":{"OUT":1}}`, "data", "r1", "", "", false},
		{`{"id":"r2","type":"data","seq":3,"data":{"OUT":1}}`, "data", "r2", "", "", false},
		{`{"type":"data","id":"a\"b","seq":0,"data":{}}`, "data", `a"b`, "", "", false},
		{`{"type":"done","id":"r1","reason":"cancelled"}`, "done", "r1", "", "cancelled", false},
		{`{"type":"error","id":"r1","error":{"code":"too_many_requests","message":"x"}}`, "error", "r1", "too_many_requests", "", false},
		{`{"type":"error","error":{"code":"bad_request","message":"x"}}`, "error", "", "bad_request", "", false},
		{`not json`, "", "", "", "", true},
	}
	for _, tt := range tests {
		f, err := parseWSFrame([]byte(tt.in))
		if (err != nil) != tt.wantErr {
			t.Errorf("parseWSFrame(%s) error %v", tt.in, err)
			continue
		}
		if err != nil {
			continue
		}
		code := ""
		if f.Error != nil {
			code = f.Error.Code
		}
		if f.Type != tt.typ || f.ID != tt.id || code != tt.code || f.Reason != tt.rsn || string(f.raw) != tt.in {
			t.Errorf("parseWSFrame(%s) = %+v", tt.in, f)
		}
	}
}

// fakeWS speaks enough of streamgate.v1: each generate frame gets n data
// frames 1ms apart, then done; cancel ends a request with done/cancelled;
// model "busy" is refused with an error frame.
func fakeWS(t *testing.T, n int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{wsSubprotocol}})
		if err != nil {
			return
		}
		defer c.CloseNow()
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		var mu sync.Mutex
		cancels := map[string]context.CancelFunc{}
		var wg sync.WaitGroup
		defer wg.Wait()
		for {
			_, b, err := c.Read(ctx)
			if err != nil {
				return
			}
			var f struct{ Type, ID, Model string }
			if err := json.Unmarshal(b, &f); err != nil {
				t.Errorf("bad client frame %s", b)
				return
			}
			switch f.Type {
			case "cancel":
				mu.Lock()
				if cf := cancels[f.ID]; cf != nil {
					cf()
				}
				mu.Unlock()
			case "generate":
				if f.Model == "busy" {
					c.Write(ctx, websocket.MessageText, fmt.Appendf(nil, `{"type":"error","id":%q,"error":{"code":"too_many_requests","message":"slow down"}}`, f.ID))
					continue
				}
				rctx, rcancel := context.WithCancel(ctx)
				mu.Lock()
				cancels[f.ID] = rcancel
				mu.Unlock()
				wg.Go(func() {
					defer rcancel()
					for i := range n {
						select {
						case <-rctx.Done():
							c.Write(ctx, websocket.MessageText, fmt.Appendf(nil, `{"type":"done","id":%q,"reason":"cancelled"}`, f.ID))
							return
						case <-time.After(time.Millisecond):
						}
						c.Write(ctx, websocket.MessageText, fmt.Appendf(nil, `{"type":"data","id":%q,"seq":%d,"data":{"OUT":%d,"IDX":%d}}`, f.ID, i, i, i))
					}
					c.Write(ctx, websocket.MessageText, fmt.Appendf(nil, `{"type":"done","id":%q,"reason":"final"}`, f.ID))
				})
			}
		}
	})
}

func TestWSTransport(t *testing.T) {
	srv := httptest.NewServer(fakeWS(t, 5))
	defer srv.Close()
	wl := workload{Model: modelRepeat, Kind: modelRepeat, Responses: 5}

	// 8 concurrent requests, 4 per socket: two sockets.
	tr := newWSTransport(srv.URL, wl, 8, 4)
	if len(tr.sockets) != 2 {
		t.Fatalf("%d sockets, want 2", len(tr.sockets))
	}
	var wg sync.WaitGroup
	recs := make([]*recorder, 8)
	for i := range recs {
		recs[i] = newRecorder(wideWindow())
		wg.Go(func() {
			for j := range 3 {
				s := stream{rec: recs[i]}
				if err := tr.do(context.Background(), int32(i*10+j), &s); err != nil {
					t.Errorf("do: %v", err)
				}
			}
		})
	}
	wg.Wait()
	total := newRecorder(wideWindow())
	for _, r := range recs {
		total.merge(r)
	}
	if total.responses != 8*3*5 || len(total.ttft) != 24 {
		t.Errorf("responses %d, ttft %d; want 120, 24", total.responses, len(total.ttft))
	}

	// Leaving mid-stream sends cancel and waits for the terminal frame.
	rec := newRecorder(wideWindow())
	s := stream{rec: rec, cancelAt: 2}
	if err := tr.do(context.Background(), 99, &s); err != errClientCancel {
		t.Errorf("leave: %v", err)
	}
	if rec.responses != 2 {
		t.Errorf("responses after leaving = %d", rec.responses)
	}
	tr.close()

	busy := newWSTransport(srv.URL, workload{Model: "busy", Kind: modelRepeat, Responses: 1}, 1, 1)
	defer busy.close()
	err := busy.do(context.Background(), 1, &stream{rec: newRecorder(wideWindow())})
	if kindOf(err) != "ws_too_many_requests" {
		t.Errorf("refused request: %v (kind %s)", err, kindOf(err))
	}
}
