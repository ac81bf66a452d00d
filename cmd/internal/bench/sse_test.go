package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func readAll(t *testing.T, body string) []string {
	t.Helper()
	rd := newSSEReader(strings.NewReader(body))
	var out []string
	for {
		data, err := rd.next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			return append(out, "ERR "+err.Error())
		}
		out = append(out, string(data))
	}
}

func TestSSEReader(t *testing.T) {
	long := strings.Repeat("x", 40<<10)
	tests := []struct {
		name, body string
		want       []string
	}{
		{"one", "data: {\"a\":1}\n\n", []string{`{"a":1}`}},
		{"gateway framing", "id: 0\ndata: {\"OUT\":1}\n\nid: 1\ndata: {\"OUT\":2}\n\n", []string{`{"OUT":1}`, `{"OUT":2}`}},
		{"no space", "data:x\n\n", []string{"x"}},
		{"two spaces keep one", "data:  x\n\n", []string{" x"}},
		{"multi-line", "data: a\ndata: b\n\n", []string{"a\nb"}},
		{"crlf", "data: a\r\n\r\ndata: b\r\n\r\n", []string{"a", "b"}},
		{"comments and keepalive", ": keepalive\n\n: hi\ndata: a\n\n", []string{"a"}},
		{"other fields", "event: message\nretry: 10\nid: 7\ndata: a\n\n", []string{"a"}},
		{"blank lines alone", "\n\n\ndata: a\n\n\n", []string{"a"}},
		{"empty data", "data\n\n", []string{""}},
		{"cut-off event dropped", "data: a\n\ndata: b\n", []string{"a"}},
		{"cut-off line", "data: a\n\ndata: b", []string{"a", "ERR unexpected EOF"}},
		{"done", "data: {}\n\ndata: [DONE]\n\n", []string{"{}", "[DONE]"}},
		{"long line", "data: " + long + "\n\n", []string{long}},
		{"empty stream", "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := readAll(t, tt.body)
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("got %q, want %q", clip(fmt.Sprint(got), 100), clip(fmt.Sprint(tt.want), 100))
			}
		})
	}
}

func TestClassifyGenerate(t *testing.T) {
	tests := []struct {
		data string
		text bool
		want eventKind
		msg  string
	}{
		{`{"model_name":"repeat_int32","model_version":"1","OUT":5,"IDX":0}`, false, evResponse, ""},
		{`{"model_name":"repeat_int32","OUT": 0}`, false, evResponse, ""},
		{`{"model_name":"repeat_int32"}`, false, evOther, ""},
		{`{"error":"expected IN and DELAY shape to match"}`, false, evError, "expected IN and DELAY shape to match"},
		{`{"text_output":"hello"}`, true, evResponse, ""},
		{`{"text_output":""  ,"finish_reason":"stop"}`, true, evOther, ""},
		{`{"text_output":"the error"}`, true, evResponse, ""},
		{`{"text_output":"\"error\":1"}`, true, evResponse, ""},
		{`{"text_output":null}`, true, evOther, ""},
		{`{"error":{"code":"x","message":"boom"}}`, true, evError, "x: boom"},
	}
	for _, tt := range tests {
		got, msg := classifyGenerate([]byte(tt.data), tt.text)
		if got != tt.want || msg != tt.msg {
			t.Errorf("classifyGenerate(%s) = %v %q, want %v %q", tt.data, got, msg, tt.want, tt.msg)
		}
	}
}

func TestClassifyChat(t *testing.T) {
	tests := []struct {
		data string
		want eventKind
	}{
		{`{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant"},"logprobs":null,"finish_reason":null}]}`, evOther},
		{`{"id":"c","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`, evOther},
		{`{"id":"c","choices":[{"index":0,"delta":{"content":" w1"},"finish_reason":null}]}`, evResponse},
		{`{"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`, evOther},
		{`{"id":"c","object":"text_completion","choices":[{"index":0,"text":"hi","finish_reason":null}]}`, evResponse},
		{`{"id":"c","choices":[],"usage":{"prompt_tokens":3}}`, evOther},
		{`[DONE]`, evDone},
		{`{"error":{"message":"too many","type":"rate_limit","param":null,"code":"too_many_requests"}}`, evError},
	}
	for _, tt := range tests {
		if got, _ := classifyChat([]byte(tt.data)); got != tt.want {
			t.Errorf("classifyChat(%s) = %v, want %v", tt.data, got, tt.want)
		}
	}
}

func FuzzSSEReader(f *testing.F) {
	for _, s := range []string{"data: a\n\n", "id: 1\ndata: {\"OUT\":1}\n\n", ": k\n\ndata: [DONE]\r\n\r\n", "data"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		rd := newSSEReader(strings.NewReader(body))
		for range len(body) + 1 {
			data, err := rd.next()
			if err != nil {
				return
			}
			classifyGenerate(data, true)
			classifyChat(data)
		}
		t.Fatal("reader did not end")
	})
}

// fakeSSE serves generate_stream and chat completions the way the gateway
// frames them, n content events each.
func fakeSSE(n int) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v2/models/{model}/generate_stream", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("model") == "busy" {
			w.Header().Set("Retry-After", "1")
			http.Error(w, `{"error":"too many requests in flight on this server"}`, http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
		fmt.Fprint(w, ": keepalive\n\n")
		for i := range n {
			fmt.Fprintf(w, "id: %d\ndata: {\"model_name\":\"repeat_int32\",\"OUT\":%d,\"IDX\":%d}\n\n", i, i, i)
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(time.Millisecond):
			}
		}
		if r.PathValue("model") == "failing" {
			fmt.Fprintf(w, "id: %d\ndata: {\"error\":\"model failed\"}\n\n", n)
		}
	})
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
		fmt.Fprint(w, "id: 0\ndata: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\"}}]}\n\n")
		for i := range n {
			fmt.Fprintf(w, "id: %d\ndata: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\" w%d\"}}]}\n\n", i+1, i)
		}
		fmt.Fprintf(w, "id: %d\ndata: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n", n+1)
		fmt.Fprintf(w, "id: %d\ndata: [DONE]\n\n", n+2)
	})
	return mux
}

func wideWindow() window {
	return window{from: time.Now().Add(-time.Hour), to: time.Now().Add(time.Hour)}
}

func TestHTTPStreamTransports(t *testing.T) {
	srv := httptest.NewServer(fakeSSE(5))
	defer srv.Close()
	wl := workload{Model: modelRepeat, Kind: modelRepeat, Responses: 5}
	ctx := context.Background()

	cases := []struct {
		name      string
		tr        *httpStream
		cancelAt  int
		wantKind  string
		wantResps int64
	}{
		{"sse", newSSETransport(srv.URL, wl, 2), 0, "", 5},
		{"chat", newChatTransport(srv.URL, workload{Model: modelEcho, Kind: modelEcho, Responses: 5}, 2), 0, "", 5},
		{"sse leaves", newSSETransport(srv.URL, wl, 2), 2, "cancel", 2},
		{"http error", newSSETransport(srv.URL, workload{Model: "busy", Kind: modelRepeat, Responses: 1}, 2), 0, "http_503", 0},
		{"error event", newSSETransport(srv.URL, workload{Model: "failing", Kind: modelRepeat, Responses: 1}, 2), 0, "error_event", 5},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			defer c.tr.close()
			rec := newRecorder(wideWindow())
			for range 3 { // the connection is reused
				s := stream{rec: rec, cancelAt: c.cancelAt}
				err := c.tr.do(ctx, 1, &s)
				switch {
				case c.wantKind == "" && err != nil:
					t.Fatalf("do: %v", err)
				case c.wantKind == "cancel" && err != errClientCancel:
					t.Fatalf("do = %v, want errClientCancel", err)
				case c.wantKind != "" && c.wantKind != "cancel" && kindOf(err) != c.wantKind:
					t.Fatalf("do = %v (kind %s), want kind %s", err, kindOf(err), c.wantKind)
				}
			}
			if rec.responses != 3*c.wantResps {
				t.Errorf("responses = %d, want %d", rec.responses, 3*c.wantResps)
			}
			if c.wantResps > 0 && (len(rec.ttft) != 3 || len(rec.gaps) != 3*int(c.wantResps-1)) {
				t.Errorf("ttft %d, gaps %d", len(rec.ttft), len(rec.gaps))
			}
		})
	}
}
