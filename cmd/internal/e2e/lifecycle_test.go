package e2e

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/streamgate/streamgate/gateway"
	"github.com/streamgate/streamgate/gateway/sse"
)

// metricValue reads one series (`name{label="v"}` as exposed) from the
// gateway's /metrics; a series not written yet is 0.
func (s *testStack) metricValue(t testing.TB, series string) float64 {
	t.Helper()
	return metric(t, http.DefaultClient, s.url, series)
}

// The headers of an event stream go out after the keepalive interval even
// when the model has not answered yet, and keepalive comments follow.
func TestSSEHeadersBeforeFirstResponse(t *testing.T) {
	s := newStack(t, &gateway.Options{SSE: &sse.Options{KeepAlive: 20 * time.Millisecond}})
	ctx, abort := context.WithCancel(t.Context())
	defer abort()
	// The first response is a minute away: only the keepalive path can
	// send the headers before it.
	resp := s.startStream(t, ctx, "/v2/models/repeat_int32/generate_stream", `{"IN":[1],"DELAY":[60000],"WAIT":0}`)
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream; charset=utf-8" {
		t.Fatalf("Content-Type %q", ct)
	}
	ev, err := sse.NewReader(resp.Body).Next()
	if err != nil || !ev.IsComment {
		t.Fatalf("first block %+v %v, want a keepalive comment", ev, err)
	}
	abort()
	waitFor(t, "engine idle", func() bool { return s.eng.InFlight() == 0 })
}

// A forced drain ends a running OpenAI stream with an OpenAI error event
// and answers a running non-streaming request with 503 and Retry-After.
func TestDrainForcedOpenAI(t *testing.T) {
	s := newStack(t, nil)
	stream := s.startStream(t, t.Context(), "/v1/completions",
		`{"model":"echo_slow","prompt":"`+words(50000)+`","max_tokens":50000,"stream":true}`)
	defer stream.Body.Close()
	r := sse.NewReader(stream.Body)
	if _, err := r.Next(); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		resp *http.Response
		body string
	}
	unary := make(chan answer, 1)
	go func() {
		resp, err := http.Post(s.url+"/v1/completions", "application/json",
			strings.NewReader(`{"model":"echo_slow","prompt":"`+words(50000)+`","max_tokens":50000}`))
		if err != nil {
			unary <- answer{}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		unary <- answer{resp, string(b)}
	}()
	waitFor(t, "both requests executing", func() bool { return s.eng.InFlight() == 2 })

	ctx, cancel := context.WithCancel(t.Context())
	cancel() // no grace: end everything now
	if err := s.gw.Drain(ctx); err != context.Canceled {
		t.Fatalf("Drain = %v", err)
	}
	if last := lastData(t, r); last != `{"error":{"message":"server is shutting down","type":"server_error","param":null,"code":"unavailable"}}` {
		t.Fatalf("stream ended with %s", last)
	}
	a := <-unary
	if a.resp == nil || a.resp.StatusCode != 503 || a.resp.Header.Get("Retry-After") != "1" ||
		a.body != `{"error":{"message":"server is shutting down","type":"server_error","param":null,"code":"unavailable"}}` {
		t.Fatalf("unary: %+v %s", a.resp, a.body)
	}
	waitFor(t, "engine idle", func() bool { return s.eng.InFlight() == 0 })
}

// Every protocol accounts its requests the same way: the active gauges
// return to zero, events are counted per protocol, a cancelled WebSocket
// request counts as the client going away, and refusals count by reason.
func TestRequestAccounting(t *testing.T) {
	s := newStack(t, &gateway.Options{MaxStreams: 2})
	if resp, body := s.post(t, "/v2/models/repeat_int32/generate_stream", `{"IN":[1,2,3],"DELAY":[0,0,0],"WAIT":0}`); resp.StatusCode != 200 || len(events(t, body)) != 3 {
		t.Fatalf("stream: %d %s", resp.StatusCode, body)
	}
	if resp, body := s.post(t, "/v2/models/square_int32/generate", `{"IN":1}`); resp.StatusCode != 200 {
		t.Fatalf("generate: %d %s", resp.StatusCode, body)
	}
	c := s.dialWS(t)
	wsSend(t, c, `{"type":"generate","id":"sq","model":"square_int32","body":{"IN":2}}`)
	for {
		f, raw, err := wsRead(t, c)
		if err != nil {
			t.Fatal(err)
		}
		if f.Type == "done" {
			break
		}
		if f.Type != "data" {
			t.Fatalf("frame %s", raw)
		}
	}
	wsSend(t, c, `{"type":"completions","id":"long","body":{"model":"echo_slow","prompt":"`+words(50000)+`","max_tokens":50000,"stream":true}}`)
	if f, raw, err := wsRead(t, c); err != nil || f.Type != "data" {
		t.Fatalf("long: %s %v", raw, err)
	}
	// Two requests in flight fill MaxStreams: a third is refused.
	a := s.startStream(t, t.Context(), "/v2/models/echo_slow/generate_stream", longStream)
	defer a.Body.Close()
	if resp, _ := s.post(t, "/v2/models/square_int32/generate", `{"IN":1}`); resp.StatusCode != 503 {
		t.Fatalf("third request: %d", resp.StatusCode)
	}
	wsSend(t, c, `{"type":"cancel","id":"long"}`)
	for {
		f, raw, err := wsRead(t, c)
		if err != nil {
			t.Fatal(err)
		}
		if f.ID == "long" && f.Type == "done" {
			if f.Reason != "cancelled" {
				t.Fatalf("long ended %s", raw)
			}
			break
		}
	}
	a.Body.Close()
	waitFor(t, "engine idle", func() bool { return s.eng.InFlight() == 0 })
	waitFor(t, "the requests to end", func() bool {
		return s.metricValue(t, `streamgate_gateway_active_requests{protocol="sse"}`) == 0 &&
			s.metricValue(t, `streamgate_gateway_active_requests{protocol="ws"}`) == 0
	})
	for series, want := range map[string]float64{
		`streamgate_gateway_active_requests{protocol="http"}`:      0,
		`streamgate_gateway_client_gone_total{protocol="ws"}`:      1,
		`streamgate_gateway_client_gone_total{protocol="sse"}`:     1,
		`streamgate_gateway_rejected_total{reason="global_limit"}`: 1,
	} {
		if got := s.metricValue(t, series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
	// The first stream's 3 events (square's 2 frames on ws), and at least
	// the one each long request had sent before it ended.
	if got := s.metricValue(t, `streamgate_gateway_stream_events_total{protocol="sse"}`); got < 4 {
		t.Errorf("sse events %v, want at least 4", got)
	}
	if got := s.metricValue(t, `streamgate_gateway_stream_events_total{protocol="ws"}`); got < 3 {
		t.Errorf("ws events %v, want at least 3", got)
	}
	c.Close(websocket.StatusNormalClosure, "")
}
