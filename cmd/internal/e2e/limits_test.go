package e2e

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/streamgate/streamgate/cmd/internal/stack"
	"github.com/streamgate/streamgate/gateway"
	"github.com/streamgate/streamgate/gateway/sse"
)

// longStream is a generate_stream body that only cancellation ends.
var longStream = `{"text_input":"` + words(50000) + `","stream":true,"parameters":{"delay_ms":20}}`

func TestGlobalStreamLimit(t *testing.T) {
	s := newStack(t, &gateway.Options{MaxStreams: 1, RetryAfter: 1500 * time.Millisecond})
	ctx, abort := context.WithCancel(t.Context())
	a := s.startStream(t, ctx, "/v2/models/echo/generate_stream", longStream)
	if _, err := sse.NewReader(a.Body).Next(); err != nil {
		t.Fatal(err)
	}
	resp, body := s.post(t, "/v2/models/echo/generate_stream", `{"text_input":"x"}`)
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "2" || body != `{"error":"too many requests in flight on this server"}` {
		t.Fatalf("v2: %d %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	resp, body = s.post(t, "/v1/completions", `{"model":"echo","prompt":"x"}`)
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "2" ||
		body != `{"error":{"message":"too many requests in flight on this server","type":"server_error","param":null,"code":"unavailable"}}` {
		t.Fatalf("v1: %d %s", resp.StatusCode, body)
	}
	c := s.dialWS(t)
	wsSend(t, c, `{"type":"generate","id":"w","model":"square_int32","body":{"IN":1}}`)
	if _, raw, err := wsRead(t, c); err != nil || string(raw) != `{"type":"error","id":"w","error":{"code":"unavailable","message":"too many requests in flight on this server"}}` {
		t.Fatalf("ws: %s %v", raw, err)
	}
	abort()
	a.Body.Close()
	waitFor(t, "the slot to free", func() bool {
		resp, _ := s.post(t, "/v2/models/square_int32/generate", `{"IN":1}`)
		return resp.StatusCode == 200
	})
	c.Close(websocket.StatusNormalClosure, "")
}

// With HTTP/2 many requests share one connection; the per-connection limit
// answers 429.
func TestPerConnectionStreamLimit(t *testing.T) {
	var h2c http.Protocols // HTTP/2 without TLS, on both ends
	h2c.SetUnencryptedHTTP2(true)
	s := newStack(t, &gateway.Options{MaxStreamsPerConn: 1}, func(c *stack.Config) {
		c.Server = func(srv *http.Server) {
			srv.Protocols = new(http.Protocols)
			srv.Protocols.SetHTTP1(true)
			srv.Protocols.SetUnencryptedHTTP2(true)
		}
	})
	client := &http.Client{Transport: &http.Transport{Protocols: &h2c}}
	defer client.CloseIdleConnections()
	ctx, abort := context.WithCancel(t.Context())
	defer abort()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.url+"/v2/models/echo/generate_stream", strings.NewReader(longStream))
	a, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Body.Close()
	if a.ProtoMajor != 2 {
		t.Fatalf("proto %s", a.Proto)
	}
	if _, err := sse.NewReader(a.Body).Next(); err != nil {
		t.Fatal(err)
	}
	resp, err := client.Post(s.url+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"echo","messages":[{"role":"user","content":"x"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "1" ||
		string(body) != `{"error":{"message":"too many requests in flight on this connection","type":"rate_limit_error","param":null,"code":"too_many_requests"}}` {
		t.Fatalf("%d %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	abort()
	waitFor(t, "engine idle", func() bool { return s.eng.InFlight() == 0 })
	client.CloseIdleConnections()
}

// Drain: readiness fails and new work is refused at once, idle sockets
// close with 1001, running streams continue until the deadline, then SSE
// streams end with an error event and sockets close with 1001.
func TestDrainForced(t *testing.T) {
	s := newStack(t, nil)
	a := s.startStream(t, t.Context(), "/v2/models/echo/generate_stream", longStream)
	defer a.Body.Close()
	ar := sse.NewReader(a.Body)
	if _, err := ar.Next(); err != nil {
		t.Fatal(err)
	}
	busy, idle := s.dialWS(t), s.dialWS(t)
	wsSend(t, busy, `{"type":"completions","id":"long","body":{"model":"echo_slow","prompt":"`+words(50000)+`","max_tokens":50000}}`)
	if f, _, err := wsRead(t, busy); err != nil || f.Type != "data" {
		t.Fatalf("busy socket: %+v %v", f, err)
	}

	ctx, deadline := context.WithCancel(t.Context())
	drained := make(chan error, 1)
	go func() { drained <- s.gw.Drain(ctx) }()

	waitFor(t, "readiness to fail", func() bool {
		resp, body := s.get(t, "/readyz")
		return resp.StatusCode == 503 && body == `{"status":"draining"}`
	})
	if resp, _ := s.get(t, "/v2/health/ready"); resp.StatusCode != 503 {
		t.Fatalf("/v2/health/ready = %d", resp.StatusCode)
	}
	resp, body := s.post(t, "/v2/models/square_int32/generate_stream", `{"IN":1}`)
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || body != `{"error":"server is shutting down"}` {
		t.Fatalf("new request while draining: %d %s", resp.StatusCode, body)
	}
	if _, _, err := wsRead(t, idle); websocket.CloseStatus(err) != websocket.StatusGoingAway {
		t.Fatalf("idle socket: %v, want 1001", err)
	}
	wsSend(t, busy, `{"type":"generate","id":"late","model":"square_int32","body":{"IN":1}}`)
	for {
		f, raw, err := wsRead(t, busy)
		if err != nil {
			t.Fatal(err)
		}
		if f.ID == "late" {
			if string(raw) != `{"type":"error","id":"late","error":{"code":"unavailable","message":"server is shutting down"}}` {
				t.Fatalf("late request: %s", raw)
			}
			break
		}
	}
	select {
	case err := <-drained:
		t.Fatalf("Drain returned %v with streams running", err)
	default:
	}

	deadline() // time is up
	if last := lastData(t, ar); last != `{"error":"server is shutting down"}` {
		t.Fatalf("SSE stream ended with %s", last)
	}
	for {
		if _, _, err := wsRead(t, busy); err != nil {
			if websocket.CloseStatus(err) != websocket.StatusGoingAway {
				t.Fatalf("busy socket: %v, want 1001", err)
			}
			break
		}
	}
	if err := <-drained; !errors.Is(err, context.Canceled) {
		t.Fatalf("Drain = %v", err)
	}
	waitFor(t, "engine idle", func() bool { return s.eng.InFlight() == 0 })
}

func TestDrainGraceful(t *testing.T) {
	s := newStack(t, nil)
	a := s.startStream(t, t.Context(), "/v2/models/echo/generate_stream", `{"text_input":"`+words(20)+`","stream":true,"parameters":{"delay_ms":10}}`)
	defer a.Body.Close()
	done := make(chan []string)
	go func() {
		b, _ := io.ReadAll(a.Body)
		done <- events(t, string(b))
	}()
	if err := s.gw.Drain(t.Context()); err != nil {
		t.Fatalf("Drain = %v", err)
	}
	if evs := <-done; len(evs) != 21 {
		t.Fatalf("stream got %d events", len(evs))
	}
}
