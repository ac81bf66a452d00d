package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/streamgate/streamgate/gateway"
)

// Faults of the client are counted as the client's: a 4xx status or 499
// (the client left) in /metrics, nothing logged as a failure, and no 5xx
// anywhere.

// dialRaw opens a TCP connection to the gateway, closed when the test ends.
func dialRaw(t *testing.T, s *testStack) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// noServerFaults fails if the gateway logged a failure or answered 5xx.
func noServerFaults(t *testing.T, s *testStack) {
	t.Helper()
	if logs := s.logs.String(); strings.Contains(logs, "request failed") {
		t.Errorf("a client fault was logged as a failure:\n%s", tail(logs, 4<<10))
	}
	resp, err := http.Get(s.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "streamgate_gateway_http_requests_total") && strings.Contains(line, `code="5`) {
			t.Errorf("a client fault counted as a server fault: %s", line)
		}
	}
}

// A body sent byte by byte, slower than --body-min-rate allows, gets 408
// and its connection is closed: 200 such clients hold nothing. A stream
// that outlives the body deadline is not cut by it.
func TestSlowBodiesClosed(t *testing.T) {
	s := newStack(t, &gateway.Options{BodyTimeout: 300 * time.Millisecond})
	slowBodies(t, s.url, s.addr, 200)
	// Three events 200ms apart: the stream outlives the body deadline.
	resp, body := s.post(t, "/v2/models/repeat_int32/generate_stream", `{"IN":[1,2,3],"DELAY":[200,200,200],"WAIT":0}`)
	if resp.StatusCode != 200 || len(events(t, body)) != 3 {
		t.Errorf("stream past the body deadline: %d %s", resp.StatusCode, body)
	}
	noServerFaults(t, s)
}

// A client that leaves in the middle of its upload is a client gone
// (499), whether the body has a length or is chunked.
func TestAbortedUpload(t *testing.T) {
	s := newStack(t, nil)
	for _, tc := range []struct{ route, head, part string }{
		{"/v2/models/{model}/generate", "POST /v2/models/repeat_int32/generate HTTP/1.1\r\nContent-Length: 1000\r\n", `{"IN":[1],`},
		{"/v1/chat/completions", "POST /v1/chat/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n", "a\r\n{\"model\":\"\r\n"},
	} {
		c := dialRaw(t, s)
		fmt.Fprintf(c, "%sHost: localhost\r\nContent-Type: application/json\r\n\r\n%s", tc.head, tc.part)
		c.Close()
		series := `streamgate_gateway_http_requests_total{code="499",route="` + tc.route + `"}`
		waitFor(t, tc.route+" counted as 499", func() bool { return s.metricValue(t, series) == 1 })
	}
	noServerFaults(t, s)
}

// Malformed chunked encoding is the client's error: 400 in the route's
// error shape, naming the fault.
func TestMalformedChunkedBody(t *testing.T) {
	s := newStack(t, nil)
	for _, tc := range []struct{ path, want string }{
		{"/v2/models/repeat_int32/generate_stream", `{"error":"malformed request body: invalid byte in chunk length"}`},
		{"/v1/completions", `{"error":{"message":"malformed request body: invalid byte in chunk length","type":"invalid_request_error","param":null,"code":"bad_request"}}`},
	} {
		c := dialRaw(t, s)
		fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n", tc.path)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || string(body) != tc.want {
			t.Errorf("%s: %d %s", tc.path, resp.StatusCode, body)
		}
	}
	noServerFaults(t, s)
}

// A WebSocket the client closes while its requests run ends them as the
// client's doing: counted as client gone, nothing logged, no 5xx.
func TestWebSocketClosedByClient(t *testing.T) {
	s := newStack(t, nil)
	c := s.dialWS(t)
	for i := range 3 {
		wsSend(t, c, fmt.Sprintf(`{"type":"generate","id":"r%d","model":"repeat_int32","body":{"IN":[1,2],"DELAY":[0,60000],"WAIT":0}}`, i))
	}
	for range 3 {
		if f, raw, err := wsRead(t, c); err != nil || f.Type != "data" {
			t.Fatalf("%s %v", raw, err)
		}
	}
	c.Close(websocket.StatusNormalClosure, "bye")
	waitFor(t, "the requests to end", func() bool {
		return s.metricValue(t, `streamgate_gateway_client_gone_total{protocol="ws"}`) == 3
	})
	waitFor(t, "engine idle", func() bool { return s.eng.InFlight() == 0 })
	if got := s.metricValue(t, `streamgate_gateway_http_requests_total{code="101",route="/v1/ws"}`); got != 1 {
		t.Errorf("the socket counted %v times as 101", got)
	}
	noServerFaults(t, s)
}
