package e2e

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/streamgate/streamgate/gateway"
)

// With --cors-origins a page on an allowed origin may call every route:
// preflights are answered on any path, responses carry
// Access-Control-Allow-Origin and the headers the page may read. Other
// origins' preflights are refused in the route's shape; without the flag
// there are no CORS headers at all.
func TestCORSHeaders(t *testing.T) {
	s := newStack(t, &gateway.Options{CORSOrigins: []string{"https://app.example", "*.other.example:8443"}})
	c := httpClient(t)
	do := func(method, path, origin string, hdr ...string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(method, s.url+path, nil)
		req.Header.Set("Origin", origin)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	for _, tc := range []struct{ path, origin string }{
		{"/v1/chat/completions", "https://app.example"},
		{"/v2/models/repeat_int32/generate_stream", "http://x.other.example:8443"},
		{"/v1/streams/abc", "https://app.example"}, // any path, routed or not
	} {
		resp, body := do(http.MethodOptions, tc.path, tc.origin,
			"Access-Control-Request-Method", "POST", "Access-Control-Request-Headers", "authorization, content-type, x-stainless-os")
		h := resp.Header
		if resp.StatusCode != http.StatusNoContent || body != "" || h.Get("Access-Control-Allow-Origin") != tc.origin ||
			h.Get("Access-Control-Allow-Methods") != "GET, POST, DELETE" ||
			h.Get("Access-Control-Allow-Headers") != "authorization, content-type, x-stainless-os" ||
			h.Get("Access-Control-Max-Age") != "600" || !strings.Contains(h.Get("Vary"), "Origin") {
			t.Errorf("preflight %s from %s: %d %v %q", tc.path, tc.origin, resp.StatusCode, h, body)
		}
	}
	resp, body := do(http.MethodGet, "/v1/models", "https://app.example")
	if resp.StatusCode != 200 || resp.Header.Get("Access-Control-Allow-Origin") != "https://app.example" ||
		resp.Header.Get("Access-Control-Expose-Headers") != "Retry-After, Streamgate-Stream-Id, X-Ratelimit-Limit-Requests, X-Ratelimit-Remaining-Requests, "+
			"X-Ratelimit-Reset-Requests, X-Ratelimit-Limit-Tokens, X-Ratelimit-Remaining-Tokens, X-Ratelimit-Reset-Tokens" {
		t.Errorf("GET /v1/models from an allowed origin: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	for _, tc := range []struct{ path, want string }{
		{"/v1/completions", `{"error":{"message":"origin https://evil.example may not call this server from a browser (see --origins)","type":"invalid_request_error","param":null,"code":"origin_not_allowed"}}`},
		{"/v2/models/m/generate", `{"error":"origin https://evil.example may not call this server from a browser (see --origins)"}`},
	} {
		resp, body := do(http.MethodOptions, tc.path, "https://evil.example", "Access-Control-Request-Method", "POST")
		if resp.StatusCode != http.StatusForbidden || body != tc.want || resp.Header.Get("Access-Control-Allow-Origin") != "" {
			t.Errorf("preflight from another origin: %d %v %s", resp.StatusCode, resp.Header, body)
		}
	}
	// A request from another origin is served (a same-origin POST also
	// carries Origin), without CORS headers: the browser keeps its
	// answer from the page.
	resp, _ = do(http.MethodGet, "/v1/models", "https://evil.example")
	if resp.StatusCode != 200 || resp.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("GET from another origin: %d %v", resp.StatusCode, resp.Header)
	}

	plain := newStack(t, nil)
	req, _ := http.NewRequest(http.MethodOptions, plain.url+"/v1/chat/completions", nil)
	req.Header.Set("Origin", "https://app.example")
	req.Header.Set("Access-Control-Request-Method", "POST")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("preflight without --cors-origins: %d %v", resp.StatusCode, resp.Header)
	}
}

// corsPage is a web app on another origin than the gateway's: its calls
// are cross-origin, with preflights (JSON bodies, an Authorization
// header).
const corsPage = `<!doctype html>
<html><head><meta charset="utf-8"><link rel="icon" href="data:,"></head><body><script>
"use strict";
window.cors = {
  async chat(api) {
    const resp = await fetch(api + "/v1/chat/completions", {
      method: "POST",
      headers: { "Content-Type": "application/json", "Authorization": "Bearer none" },
      body: JSON.stringify({ model: "echo", stream: true, messages: [{ role: "user", content: "from afar" }] }),
    });
    const text = await resp.text();
    return { status: resp.status, contentType: resp.headers.get("content-type"), text };
  },
  async generate(api) {
    const resp = await fetch(api + "/v2/models/repeat_int32/generate_stream", {
      method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ IN: [1, 2], DELAY: [0, 0], WAIT: 0 }),
    });
    return { status: resp.status, text: await resp.text() };
  },
  async models(api) {
    const resp = await fetch(api + "/v1/models");
    return { status: resp.status, body: await resp.json() };
  },
  async refused(api) {
    try {
      await fetch(api + "/v1/chat/completions", {
        method: "POST", headers: { "Content-Type": "application/json" }, body: "{}",
      });
      return "fetched";
    } catch (e) {
      return e.name;
    }
  },
};
</script></body></html>
`

// servePageOn serves corsPage on a loopback port of its own: another
// origin than the gateway's. It returns the page's origin.
func servePageOn(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		io.WriteString(w, corsPage)
	})}
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(lis)
	}()
	t.Cleanup(func() {
		srv.Close()
		<-done
	})
	return "http://" + lis.Addr().String()
}

// TestCORSBrowser: headless Chromium runs a page from a second origin
// that streams a chat and a generate_stream (both preflighted) and lists
// the models from the gateway; a page on a third origin, not allowed, is
// refused by the browser.
func TestCORSBrowser(t *testing.T) {
	requireTool(t, "chromium", "/usr/bin/chromium")
	allowed, other := servePageOn(t), servePageOn(t)
	s := newStack(t, &gateway.Options{CORSOrigins: []string{allowed}})
	browser := startChromium(t)
	page := browser.openPage(t)
	page.load(t, allowed+"/", `typeof window.cors === "object"`)
	api := `"` + s.url + `"`

	var chat struct {
		Status      int
		ContentType string
		Text        string
	}
	page.eval(t, "cors.chat("+api+")", &chat)
	if chat.Status != 200 || chat.ContentType != "text/event-stream; charset=utf-8" ||
		!strings.Contains(chat.Text, "afar") || !strings.HasSuffix(chat.Text, "data: [DONE]\n\n") {
		t.Errorf("chat from %s: %+v", allowed, chat)
	}
	var gen struct {
		Status int
		Text   string
	}
	page.eval(t, "cors.generate("+api+")", &gen)
	if gen.Status != 200 || len(events(t, gen.Text)) != 2 {
		t.Errorf("generate_stream from %s: %+v", allowed, gen)
	}
	var models struct {
		Status int
		Body   struct{ Data []struct{ ID string } }
	}
	page.eval(t, "cors.models("+api+")", &models)
	if models.Status != 200 || len(models.Body.Data) == 0 {
		t.Errorf("models from %s: %+v", allowed, models)
	}
	if p := page.takeProblems(); len(p) > 0 {
		t.Errorf("the allowed page logged problems: %v", p)
	}
	if got := s.metricValue(t, `streamgate_gateway_http_requests_total{code="204",route="unmatched"}`); got < 2 {
		t.Errorf("%v preflights answered, want at least 2", got)
	}

	page.load(t, other+"/", `typeof window.cors === "object"`)
	var refused string
	page.eval(t, "cors.refused("+api+")", &refused)
	if refused != "TypeError" {
		t.Errorf("a page on %s, not allowed, fetched: %s", other, refused)
	}
	page.takeProblems() // the browser reports the CORS refusal
}
