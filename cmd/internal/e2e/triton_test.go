package e2e

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

func TestGenerateStreamFraming(t *testing.T) {
	s := newStack(t, noKeepAlive())
	resp, body := s.post(t, "/v2/models/repeat_int32/generate_stream", `{"id":"q1","IN":[10,11,12],"DELAY":[0,0,0],"WAIT":0}`)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	for k, v := range map[string]string{"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"} {
		if got := resp.Header.Get(k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	want := "id: 1\ndata: {\"id\":\"q1\",\"model_name\":\"repeat_int32\",\"model_version\":\"1\",\"OUT\":10,\"IDX\":0}\n\n" +
		"id: 2\ndata: {\"id\":\"q1\",\"model_name\":\"repeat_int32\",\"model_version\":\"1\",\"OUT\":11,\"IDX\":1}\n\n" +
		"id: 3\ndata: {\"id\":\"q1\",\"model_name\":\"repeat_int32\",\"model_version\":\"1\",\"OUT\":12,\"IDX\":2}\n\n"
	if body != want {
		t.Fatalf("body\n%q\nwant\n%q", body, want)
	}
}

func TestGenerateStreamSquareZeroIsEmpty(t *testing.T) {
	s := newStack(t, noKeepAlive())
	resp, body := s.post(t, "/v2/models/square_int32/generate_stream", `{"IN":0}`)
	if resp.StatusCode != 200 || body != "" {
		t.Fatalf("status %d body %q, want 200 and empty", resp.StatusCode, body)
	}
	resp, body = s.post(t, "/v2/models/square_int32/generate_stream", `{"IN":3}`)
	if got := events(t, body); resp.StatusCode != 200 || len(got) != 3 || got[2] != `{"model_name":"square_int32","model_version":"1","OUT":3}` {
		t.Fatalf("IN=3: %d %q", resp.StatusCode, got)
	}
}

// TestGenerateStreamErrorInBand: as in Triton, the first response sets the
// status, so a model error that comes first is an error status with the
// error event as its event-stream body.
func TestGenerateStreamErrorInBand(t *testing.T) {
	s := newStack(t, noKeepAlive())
	resp, body := s.post(t, "/v2/models/repeat_int32/generate_stream", `{"IN":[1],"DELAY":[0,0],"WAIT":0}`)
	want := "id: 1\ndata: {\"error\":\"expected IN and DELAY shape to match, got [1] and [2]\"}\n\n"
	if resp.StatusCode != 400 || body != want || resp.Header.Get("Content-Type") != "text/event-stream; charset=utf-8" {
		t.Fatalf("status %d type %q body %q, want 400 %q", resp.StatusCode, resp.Header.Get("Content-Type"), body, want)
	}
}

func TestGenerateErrorsBeforeStream(t *testing.T) {
	s := newStack(t, nil)
	cases := []struct {
		path, body string
		status     int
		want       string
	}{
		{"/v2/models/nope/generate_stream", `{}`, 404, `{"error":"Request for unknown model: 'nope' is not found"}`},
		{"/v2/models/repeat_int32/generate_stream", `{"IN":["x"]}`, 400, `{"error":"unable to convert element 0 of input 'IN' to INT32: expected an integer, got a string"}`},
		{"/v2/models/repeat_int32/generate", "{\"IN\":[1,]}", 400, `{"error":"failed to parse the request JSON buffer: invalid character ']' looking for beginning of value at line 1, column 10 (offset 9)"}`},
		{"/v2/models/repeat_int32/generate", `{"id":5}`, 400, `{"error":"Unable to parse 'id'"}`},
		{"/v2/models/repeat_int32/versions/7/generate", `{}`, 404, `{"error":"Request for unknown model: 'repeat_int32' version 7 is not found"}`},
	}
	for _, tc := range cases {
		resp, body := s.post(t, tc.path, tc.body)
		if resp.StatusCode != tc.status || body != tc.want || resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("POST %s %s = %d %s, want %d %s", tc.path, tc.body, resp.StatusCode, body, tc.status, tc.want)
		}
	}
	resp, _ := s.get(t, "/v2/models/repeat_int32/generate")
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET generate = %d", resp.StatusCode)
	}
	req, _ := http.NewRequest(http.MethodPost, s.url+"/v2/models/repeat_int32/generate", strings.NewReader("x"))
	req.Header.Set("Content-Encoding", "gzip")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusUnsupportedMediaType {
		t.Errorf("gzip body: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	big := `{"IN":[` + strings.Repeat("1,", 1<<20) + `1]}`
	if resp, body := s.post(t, "/v2/models/repeat_int32/generate", big); resp.StatusCode != 413 || !strings.Contains(body, "request body too large") {
		t.Errorf("big body = %d %s", resp.StatusCode, body)
	}
}

func TestGenerate(t *testing.T) {
	s := newStack(t, nil)
	resp, body := s.post(t, "/v2/models/identity_int32/generate", `{"id":"a","INPUT0":[1,2,3]}`)
	if resp.StatusCode != 200 || body != `{"id":"a","model_name":"identity_int32","model_version":"1","OUTPUT0":[1,2,3]}` {
		t.Fatalf("identity: %d %s", resp.StatusCode, body)
	}
	resp, body = s.post(t, "/v2/models/square_int32/generate", `{"IN":1}`)
	if resp.StatusCode != 200 || body != `{"model_name":"square_int32","model_version":"1","OUT":1}` {
		t.Fatalf("square 1: %d %s", resp.StatusCode, body)
	}
	for _, in := range []string{"0", "2"} {
		resp, body = s.post(t, "/v2/models/square_int32/generate", `{"IN":`+in+`}`)
		if resp.StatusCode != 400 || body != `{"error":"generate expects model to produce exactly 1 response, use generate stream for model that generates various number of responses"}` {
			t.Fatalf("square %s: %d %s", in, resp.StatusCode, body)
		}
	}
}

func TestMetadataAndHealth(t *testing.T) {
	s := newStack(t, nil)
	cases := []struct {
		path   string
		status int
		want   string
	}{
		{"/v2/health/live", 200, ""},
		{"/v2/health/ready", 200, ""},
		{"/v2/models/square_int32/ready", 200, ""},
		{"/v2/models/square_int32/versions/1/ready", 200, ""},
		{"/v2/models/nope/ready", 503, ""},
		{"/v2/models/square_int32", 200, `{"name":"square_int32","versions":["1"],"platform":"square","inputs":[{"name":"IN","datatype":"INT32","shape":[1]}],"outputs":[{"name":"OUT","datatype":"INT32","shape":[1]}]}`},
		{"/v2/models/nope", 404, `{"error":"Request for unknown model: 'nope' is not found"}`},
		{"/healthz", 200, `{"status":"ok"}`},
		{"/readyz", 200, `{"status":"ready"}`},
	}
	for _, tc := range cases {
		resp, body := s.get(t, tc.path)
		if resp.StatusCode != tc.status || body != tc.want {
			t.Errorf("GET %s = %d %s, want %d %s", tc.path, resp.StatusCode, body, tc.status, tc.want)
		}
	}
	resp, body := s.get(t, "/v2")
	if resp.StatusCode != 200 || !strings.Contains(body, `"extensions":[`) || !strings.Contains(body, `"name":"streamgate"`) {
		t.Errorf("GET /v2 = %d %s", resp.StatusCode, body)
	}
	resp, body = s.get(t, "/metrics")
	if resp.StatusCode != 200 || !strings.Contains(body, `streamgate_gateway_http_requests_total{code="404",route="/v2/models/{model}"} 1`) ||
		!strings.Contains(body, "streamgate_upstream_requests_total ") {
		t.Errorf("GET /metrics = %d\n%s", resp.StatusCode, body)
	}
}

// A model name is decoded the same way whatever it escapes: %2F is a
// slash in the name as %00 is a NUL, on /v2 and /v1 alike.
func TestEscapedModelNames(t *testing.T) {
	s := newStack(t, nil)
	for _, tc := range []struct{ path, want string }{
		{"/v2/models/a%2Fb", `{"error":"Request for unknown model: 'a/b' is not found"}`},
		{"/v2/models/a%00b", `{"error":"Request for unknown model: 'a\u0000b' is not found"}`},
		{"/v2/models/a%2Fb%20c/versions/1", `{"error":"Request for unknown model: 'a/b c' is not found"}`},
		{"/v1/models/a%2Fb", `{"error":{"message":"The model 'a/b' does not exist","type":"invalid_request_error","param":"model","code":"model_not_found"}}`},
	} {
		resp, body := s.get(t, tc.path)
		if resp.StatusCode != 404 || body != tc.want {
			t.Errorf("GET %s = %d %s, want 404 %s", tc.path, resp.StatusCode, body, tc.want)
		}
	}
	resp, body := s.post(t, "/v2/models/repeat%5Fint32/generate", `{"IN":[7],"DELAY":[0],"WAIT":0}`)
	if resp.StatusCode != 200 || body != `{"model_name":"repeat_int32","model_version":"1","OUT":7,"IDX":0}` {
		t.Errorf("escaped name of a real model: %d %s", resp.StatusCode, body)
	}
}

// A request no route takes is answered in its API's error shape: 405
// with Allow when the path exists for other methods, else 404, with the
// nearest route when one is near.
func TestNoRoute(t *testing.T) {
	s := newStack(t, nil)
	c := httpClient(t)
	for _, tc := range []struct{ method, path, allow, want string }{
		{"GET", "/v2/models/repeat_int32/generate", "POST", `{"error":"method GET is not allowed on /v2/models/repeat_int32/generate (allowed: POST)"}`},
		{"DELETE", "/v2/models/repeat_int32", "GET", `{"error":"method DELETE is not allowed on /v2/models/repeat_int32 (allowed: GET)"}`},
		{"GET", "/v2/nothing", "", `{"error":"no route for GET /v2/nothing"}`},
		{"GET", "/v1/chat/completions", "POST", `{"error":{"message":"method GET is not allowed on /v1/chat/completions (allowed: POST)","type":"invalid_request_error","param":null,"code":"method_not_allowed"}}`},
		{"POST", "/v1/models", "GET", `{"error":{"message":"method POST is not allowed on /v1/models (allowed: GET)","type":"invalid_request_error","param":null,"code":"method_not_allowed"}}`},
		{"POST", "/v1/assistants", "", `{"error":{"message":"no route for POST /v1/assistants","type":"invalid_request_error","param":null,"code":"not_found"}}`},
		{"PUT", "/v1/responses", "POST", `{"error":{"message":"method PUT is not allowed on /v1/responses (allowed: POST)","type":"invalid_request_error","param":null,"code":"method_not_allowed"}}`},
		{"GET", "/v1", "", `{"error":{"message":"no route for GET /v1","type":"invalid_request_error","param":null,"code":"not_found"}}`},
		// A typo gets the route it probably meant, the path's own
		// parameters kept.
		{"POST", "/v1/chat/completion", "", `{"error":{"message":"no route for POST /v1/chat/completion; did you mean POST /v1/chat/completions?","type":"invalid_request_error","param":null,"code":"not_found"}}`},
		{"POST", "/v2/models/echo/generate_strem", "", `{"error":"no route for POST /v2/models/echo/generate_strem; did you mean POST /v2/models/echo/generate_stream?"}`},
		{"GET", "/v2/health/redy", "", `{"error":"no route for GET /v2/health/redy; did you mean GET /v2/health/ready?"}`},
	} {
		req, _ := http.NewRequest(tc.method, s.url+tc.path, nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		status := 404
		if tc.allow != "" {
			status = 405
		}
		if resp.StatusCode != status || resp.Header.Get("Allow") != tc.allow || string(body) != tc.want ||
			resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s %s = %d Allow %q %s\nwant %d Allow %q %s", tc.method, tc.path, resp.StatusCode, resp.Header.Get("Allow"), body, status, tc.allow, tc.want)
		}
	}
}
