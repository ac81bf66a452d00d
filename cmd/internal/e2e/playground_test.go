package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/streamgate/streamgate/cmd/internal/stack"
	"github.com/streamgate/streamgate/gateway"
	"github.com/streamgate/streamgate/gateway/store"
)

// playgroundHelpers drive the playground the way a person does: set a
// field and fire its input and change events, click, read the cards.
const playgroundHelpers = `window.pgt = {
  set(id, value) {
    const el = document.getElementById(id);
    el.value = value;
    el.dispatchEvent(new Event("input", { bubbles: true }));
    el.dispatchEvent(new Event("change", { bubbles: true }));
  },
  pick(name, value) {
    document.querySelector('input[name="' + name + '"][value="' + value + '"]').click();
  },
  ids() { return [...document.querySelectorAll("#cards .card")].map((c) => c.dataset.run); },
  send() {
    const before = new Set(this.ids());
    document.getElementById("send").click();
    return this.ids().filter((id) => !before.has(id));
  },
  card(id) {
    const c = document.querySelector('#cards .card[data-run="' + id + '"]');
    const text = (sel) => c.querySelector(sel).textContent;
    return {
      state: c.dataset.state, badge: text(".badge"), what: text(".what"), text: text(".output"),
      tokens: Number(text(".tokens")), ttft: text(".ttft"), rate: text(".rate"), summary: text(".summary"),
      problem: c.querySelector(".problem").hidden ? "" : text(".problem pre"),
      bars: c.querySelectorAll(".chart path").length,
    };
  },
  click(id, cls) { document.querySelector('#cards .card[data-run="' + id + '"] .' + cls).click(); },
};
true`

// card is what pgt.card reads from one request's card.
type card struct {
	State, Badge, What, Text, TTFT, Rate, Summary, Problem string
	Tokens, Bars                                           int
}

// playground is the page under test and the stack behind it.
type playground struct {
	t    *testing.T
	s    *testStack
	page *cdp
	c    *http.Client
}

func (p *playground) js(expr string, out any) {
	p.t.Helper()
	p.page.eval(p.t, expr, out)
}

func (p *playground) set(id, value string) {
	p.t.Helper()
	p.js(fmt.Sprintf("pgt.set(%q, %s)", id, strconv.Quote(value)), nil)
}

func (p *playground) body() string {
	p.t.Helper()
	var b string
	p.js(`document.getElementById("body").value`, &b)
	return b
}

func (p *playground) send() []string {
	p.t.Helper()
	var ids []string
	p.js("pgt.send()", &ids)
	if len(ids) == 0 {
		p.t.Fatal("Send made no card")
	}
	return ids
}

func (p *playground) card(id string) card {
	p.t.Helper()
	var c card
	p.js(fmt.Sprintf("pgt.card(%q)", id), &c)
	return c
}

// waitCard waits until cond holds for card id and returns the card.
func (p *playground) waitCard(id, what string, cond func(card) bool) card {
	p.t.Helper()
	var c card
	waitFor(p.t, "card "+id+": "+what, func() bool {
		c = p.card(id)
		return cond(c)
	})
	return c
}

func finished(c card) bool {
	return c.State == "done" || c.State == "cancelled" || c.State == "dropped" || c.State == "error"
}

// tritonModel picks the Triton route and a model by name ("Other…").
func (p *playground) tritonModel(name, bodyHas string) {
	p.t.Helper()
	p.js(`pgt.pick("route", "triton")`, nil)
	waitFor(p.t, "the Other… model option", func() bool {
		var ok bool
		p.js(`[...document.getElementById("model").options].some((o) => o.value === "\u0000other")`, &ok)
		return ok
	})
	p.js(`pgt.set("model", "\u0000other")`, nil)
	p.set("model-other", name)
	waitFor(p.t, "the body prefilled from "+name+"'s metadata", func() bool {
		return strings.Contains(p.body(), bodyHas)
	})
}

// unary posts body to path without streaming and returns the status and
// the answer.
func (p *playground) unary(path, body string) (int, string) {
	p.t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		p.t.Fatalf("the page's body %q: %v", body, err)
	}
	m["stream"] = false
	delete(m, "stream_options")
	b, _ := json.Marshal(m)
	return p.post(path, string(b))
}

func (p *playground) post(path, body string) (int, string) {
	p.t.Helper()
	resp := post(p.t, p.t.Context(), p.c, p.s.url+path, body)
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		p.t.Fatal(err)
	}
	return resp.StatusCode, string(out)
}

// TestPlayground drives the playground at / in headless Chromium like a
// user: it loads with no console errors; a chat streams the model's text;
// Stop (fetch and WebSocket) and "drop connection" end the engine's work;
// two requests run at once on one WebSocket; errors appear as the server
// sent them; screenshots, light and dark, wide and narrow, are not blank.
// Its gateway makes no resumable streams (--resumable never), so that a
// dropped connection cancels its request; TestPlaygroundResume covers the
// page on resumable streams.
func TestPlayground(t *testing.T) {
	requireTool(t, "chromium", "/usr/bin/chromium")
	s := startPageStack(t, func(c *stack.Config) { c.Gateway.Resumable = gateway.ResumableNever })
	browser := startChromium(t)
	page := browser.openPage(t)
	p := &playground{t: t, s: s, page: page, c: httpClient(t)}
	model := s.textModel()
	t.Logf("text model: %s", model)

	page.load(t, s.url+"/", fmt.Sprintf(`[...document.getElementById("model").options].some((o) => o.value === %[1]q) && document.getElementById("body").value.includes(%[2]s)`,
		model, strconv.Quote(`"model": "`+model+`"`)))
	p.js(playgroundHelpers, nil)
	if problems := page.takeProblems(); len(problems) > 0 {
		t.Errorf("the page logged problems while loading:\n%s", strings.Join(problems, "\n"))
	}

	t.Run("EventSource only with resumable streams", func(t *testing.T) {
		p.t = t
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, s.url+"/v1/completions",
			strings.NewReader(`{"model":"echo","prompt":"x","stream":true}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Streamgate-Resumable", "true")
		resp, err := p.c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		resumable := resp.Header.Get("Streamgate-Stream-Id") != ""
		// The page learns it from its first answer.
		var shown bool
		p.js(`!document.getElementById("transport-es").hidden`, &shown)
		if shown {
			t.Errorf("EventSource offered before the server showed it makes resumable streams")
		}
		if !resumable {
			t.Log("this gateway makes no resumable streams: the EventSource transport stays hidden")
		}
	})

	t.Run("chat stream renders the model's text", func(t *testing.T) {
		p.t = t
		p.set("temperature", "0")
		if model == "echo" {
			p.set("prompt", "hello from the playground")
		}
		body := p.body()
		id := p.send()[0]
		c := p.waitCard(id, "done", finished)
		if c.State != "done" || c.Problem != "" {
			t.Fatalf("card %+v", c)
		}
		status, answer := p.unary("/v1/chat/completions", body)
		var want struct {
			Choices []struct {
				Message      struct{ Content string }
				FinishReason string `json:"finish_reason"`
			}
			Usage struct {
				CompletionTokens int `json:"completion_tokens"`
			}
		}
		if err := json.Unmarshal([]byte(answer), &want); err != nil || status != 200 || len(want.Choices) != 1 {
			t.Fatalf("the same request without streaming: %d %s", status, answer)
		}
		if c.Text != want.Choices[0].Message.Content || c.Text == "" {
			t.Errorf("the card shows %q, the model answers %q", c.Text, want.Choices[0].Message.Content)
		}
		if c.Badge != "done · "+want.Choices[0].FinishReason {
			t.Errorf("badge %q, finish_reason %q", c.Badge, want.Choices[0].FinishReason)
		}
		// One content delta per token piece; the usage chunk counts them.
		if c.Tokens == 0 || !strings.Contains(c.Summary, fmt.Sprintf("+ %d completion tokens", want.Usage.CompletionTokens)) {
			t.Errorf("figures: %d tokens, summary %q; the model counted %d", c.Tokens, c.Summary, want.Usage.CompletionTokens)
		}
		if model == storiesModel && want.Usage.CompletionTokens <= 16 {
			t.Errorf("a chat without max_tokens stopped after %d tokens", want.Usage.CompletionTokens)
		}
		// (tokens/s and the gaps depend on how the tokens happened to
		// arrive: all at once shows no rate.)
		if c.TTFT == "–" || (c.Tokens >= 2 && c.Bars != 1) {
			t.Errorf("figures not drawn: %+v", c)
		}
	})

	t.Run("the Triton route lists every ready model of the repository index", func(t *testing.T) {
		p.t = t
		p.js(`pgt.pick("route", "triton")`, nil)
		var opts []string
		waitFor(t, "repeat_int32 among the Triton route's models", func() bool {
			p.js(`[...document.getElementById("model").options].map((o) => o.value)`, &opts)
			return slices.Contains(opts, "repeat_int32")
		})
		for _, want := range []string{"repeat_int32", "square_int32", "identity_int32", "echo", "\u0000other"} {
			if !slices.Contains(opts, want) {
				t.Errorf("model options %q lack %q", opts, want)
			}
		}
		p.js(`pgt.set("model", "repeat_int32")`, nil)
		waitFor(t, "the body prefilled from repeat_int32's metadata", func() bool { return strings.Contains(p.body(), `"DELAY"`) })
		p.js(`pgt.pick("route", "chat")`, nil)
		p.js(`[...document.getElementById("model").options].map((o) => o.value)`, &opts)
		if slices.Contains(opts, "repeat_int32") {
			t.Errorf("the chat route offers repeat_int32: %q", opts)
		}
	})

	long := repeatBody(100, 0, 10, 1000) // ~100s of work: only a cancel ends it within the test
	for _, transport := range []string{"fetch", "ws"} {
		t.Run("stop over "+transport+" stops the engine", func(t *testing.T) {
			p.t = t
			waitFor(t, "engine idle", func() bool { return s.eng.InFlight() == 0 })
			p.tritonModel("repeat_int32", `"DELAY"`)
			p.js(fmt.Sprintf("pgt.pick(%q, %q)", "transport", transport), nil)
			p.set("count", "1")
			p.set("body", long)
			id := p.send()[0]
			c := p.waitCard(id, "its first response", func(c card) bool { return c.Tokens >= 1 || finished(c) })
			if c.State != "streaming" || c.Text != "OUT=0  IDX=0\n" {
				t.Fatalf("card %+v", c)
			}
			if n := s.eng.InFlight(); n != 1 {
				t.Fatalf("the engine runs %d requests, want 1", n)
			}
			p.js(fmt.Sprintf("pgt.click(%q, %q)", id, "stop"), nil)
			waitFor(t, "the stopped request to end in the engine", func() bool { return s.eng.InFlight() == 0 })
			c = p.waitCard(id, "cancelled", finished)
			if c.State != "cancelled" || c.Problem != "" {
				t.Errorf("after Stop: %+v", c)
			}
		})
	}

	t.Run("drop connection cuts the stream", func(t *testing.T) {
		p.t = t
		waitFor(t, "engine idle", func() bool { return s.eng.InFlight() == 0 })
		p.js(`pgt.pick("transport", "fetch")`, nil)
		id := p.send()[0]
		p.waitCard(id, "its first response", func(c card) bool { return c.Tokens >= 1 || finished(c) })
		p.js(fmt.Sprintf("pgt.click(%q, %q)", id, "drop"), nil)
		// Without resumable streams the server cancels what it can no
		// longer deliver.
		waitFor(t, "the dropped request to end in the engine", func() bool { return s.eng.InFlight() == 0 })
		c := p.waitCard(id, "dropped", finished)
		if c.State != "dropped" || !strings.Contains(c.Problem, "did not make the stream resumable") {
			t.Errorf("after drop: %+v", c)
		}
	})

	t.Run("two requests at once on one WebSocket", func(t *testing.T) {
		p.t = t
		p.js(`pgt.pick("route", "chat")`, nil)
		p.set("model", model)
		waitFor(t, "the chat body", func() bool { return strings.Contains(p.body(), `"messages"`) })
		p.set("temperature", "0")
		p.set("max-tokens", "40")
		p.js(`pgt.pick("transport", "ws")`, nil)
		p.set("count", "2")
		body := p.body()
		ids := p.send()
		if len(ids) != 2 {
			t.Fatalf("Send ×2 made %v", ids)
		}
		_, answer := p.unary("/v1/chat/completions", body)
		var want struct {
			Choices []struct{ Message struct{ Content string } }
		}
		if err := json.Unmarshal([]byte(answer), &want); err != nil || len(want.Choices) != 1 {
			t.Fatalf("the same request without streaming: %s", answer)
		}
		var socket string
		for _, id := range ids {
			c := p.waitCard(id, "done", finished)
			if c.State != "done" || c.Text != want.Choices[0].Message.Content {
				t.Errorf("card %s: %+v, want the text %q", id, c, want.Choices[0].Message.Content)
			}
			i := strings.Index(c.What, "WebSocket #")
			if i < 0 || (socket != "" && c.What[i:] != socket) {
				t.Errorf("card %s ran on %q, the other on %q: want one socket", id, c.What, socket)
			}
			if i >= 0 {
				socket = c.What[i:]
			}
		}
	})

	if problems := page.takeProblems(); len(problems) > 0 {
		t.Errorf("the page logged problems:\n%s", strings.Join(problems, "\n"))
	}

	t.Run("errors as the server sent them", func(t *testing.T) {
		p.t = t
		p.set("count", "1")
		bad := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"x"}],"n":2,"stream":true}`, model)
		_, want := p.post("/v1/chat/completions", bad)
		for _, transport := range []string{"fetch", "ws"} {
			p.js(fmt.Sprintf("pgt.pick(%q, %q)", "transport", transport), nil)
			p.set("body", bad)
			id := p.send()[0]
			c := p.waitCard(id, "error", finished)
			if c.State != "error" {
				t.Fatalf("%s: card %+v", transport, c)
			}
			var env struct {
				Error struct{ Message, Code string }
			}
			if err := json.Unmarshal([]byte(want), &env); err != nil {
				t.Fatalf("the gateway's 400: %s", want)
			}
			switch transport {
			case "fetch": // the body, byte for byte
				if c.Problem != want {
					t.Errorf("fetch: the card shows %q, the server sent %q", c.Problem, want)
				}
			case "ws": // the error frame
				if !strings.Contains(c.Problem, `"type":"error"`) || !strings.Contains(c.Problem, env.Error.Message) {
					t.Errorf("ws: the card shows %q, want the error frame with %q", c.Problem, env.Error.Message)
				}
			}
		}
		p.js(`pgt.pick("transport", "fetch")`, nil)
		p.tritonModel("nope", "{}")
		_, want = p.post("/v2/models/nope/generate_stream", "{}")
		id := p.send()[0]
		if c := p.waitCard(id, "error", finished); c.Problem != want || !strings.HasPrefix(want, `{"error":`) {
			t.Errorf("unknown model: the card shows %q, the server sent %q", c.Problem, want)
		}
	})

	screenshots(t, page)
}

// screenshots captures the page wide and narrow, in the light and dark
// colour schemes and with the theme button, checks each is not blank and
// has the scheme's background, and keeps them in the test's temp dir (and
// in $STREAMGATE_SCREENSHOT_DIR when set).
func screenshots(t *testing.T, page *cdp) {
	dir := t.TempDir()
	keep := os.Getenv("STREAMGATE_SCREENSHOT_DIR")
	for _, shot := range []struct {
		name          string
		width, height int
		scheme, theme string // theme: "" follows the scheme
		dark          bool
		full          bool // the whole page, not only the viewport
	}{
		{"wide-light", 1440, 1000, "light", "", false, false},
		{"wide-dark", 1440, 1000, "dark", "", true, false},
		{"narrow-light", 400, 860, "light", "", false, true},
		{"narrow-dark", 400, 860, "dark", "", true, true},
		{"wide-light-toggled-dark", 1440, 1000, "light", "dark", true, false},
	} {
		t.Run("screenshot "+shot.name, func(t *testing.T) {
			ctx := t.Context()
			must := func(method string, params map[string]any, out any) {
				t.Helper()
				if err := page.call(ctx, method, params, out); err != nil {
					t.Fatal(err)
				}
			}
			must("Emulation.setDeviceMetricsOverride", map[string]any{
				"width": shot.width, "height": shot.height, "deviceScaleFactor": 1, "mobile": shot.width < 600,
			}, nil)
			must("Emulation.setEmulatedMedia", map[string]any{
				"features": []map[string]string{{"name": "prefers-color-scheme", "value": shot.scheme}},
			}, nil)
			page.eval(t, fmt.Sprintf(`(() => {
				const want = %q;
				while ((document.documentElement.dataset.theme || "") !== want) document.getElementById("theme").click();
				window.scrollTo(0, 0);
				return new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(() => r(true))));
			})()`, shot.theme), nil)
			params := map[string]any{"format": "png"}
			if shot.full {
				var m struct {
					CSSContentSize struct{ Width, Height float64 } `json:"cssContentSize"`
				}
				must("Page.getLayoutMetrics", map[string]any{}, &m)
				params["captureBeyondViewport"] = true
				params["clip"] = map[string]any{"x": 0, "y": 0, "width": m.CSSContentSize.Width, "height": m.CSSContentSize.Height, "scale": 1}
			}
			var shotResult struct{ Data string }
			must("Page.captureScreenshot", params, &shotResult)
			raw, err := base64.StdEncoding.DecodeString(shotResult.Data)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range []string{dir, keep} {
				if d != "" {
					if err := os.WriteFile(filepath.Join(d, "playground-"+shot.name+".png"), raw, 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			img, err := png.Decode(bytes.NewReader(raw))
			if err != nil {
				t.Fatal(err)
			}
			st := pixels(img)
			t.Logf("%s: %dx%d, %d colours, %.0f%% background, background luminance %.2f",
				shot.name, img.Bounds().Dx(), img.Bounds().Dy(), st.colours, 100*st.background, st.luminance)
			if img.Bounds().Dx() != shot.width || st.colours < 50 || st.background > 0.95 || st.background < 0.2 {
				t.Errorf("%s looks blank or broken: %+v", shot.name, st)
			}
			if dark := st.luminance < 0.3; dark != shot.dark {
				t.Errorf("%s: background luminance %.2f, want dark=%v", shot.name, st.luminance, shot.dark)
			}
		})
	}
	page.eval(t, `(() => { while (document.documentElement.dataset.theme) document.getElementById("theme").click(); return true })()`, nil)
	_ = page.call(context.Background(), "Emulation.clearDeviceMetricsOverride", map[string]any{}, nil)
}

type pixelStats struct {
	colours    int     // distinct colours
	background float64 // share of the most common colour
	luminance  float64 // of the most common colour, 0 black to 1 white
}

func pixels(img image.Image) pixelStats {
	counts := map[[3]uint8]int{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			counts[[3]uint8{uint8(r >> 8), uint8(g >> 8), uint8(bl >> 8)}]++
		}
	}
	var bg [3]uint8
	for c, n := range counts {
		if n > counts[bg] {
			bg = c
		}
	}
	return pixelStats{
		colours:    len(counts),
		background: float64(counts[bg]) / float64(b.Dx()*b.Dy()),
		luminance:  (0.2126*float64(bg[0]) + 0.7152*float64(bg[1]) + 0.0722*float64(bg[2])) / 255,
	}
}

// headerLog records, per request, the method, path and one header.
type headerLog struct {
	name string
	mu   sync.Mutex
	seen []string // "METHOD /path: value"
}

func (l *headerLog) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l.mu.Lock()
		l.seen = append(l.seen, fmt.Sprintf("%s %s: %s", r.Method, r.URL.Path, r.Header.Get(l.name)))
		l.mu.Unlock()
		next.ServeHTTP(w, r)
	})
}

func (l *headerLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.seen
	l.seen = nil
	return s
}

// Once an API key is entered, every call the page makes carries it: HTTP
// requests as Authorization: Bearer, the WebSocket as the subprotocol
// streamgate.key.<key> after streamgate.v1.
func TestPlaygroundAPIKey(t *testing.T) {
	requireTool(t, "chromium", "/usr/bin/chromium")
	auth := &headerLog{name: "Authorization"}
	proto := &headerLog{name: "Sec-WebSocket-Protocol"}
	s := startStack(t, auth.wrap, proto.wrap)
	page := startChromium(t).openPage(t)
	p := &playground{t: t, s: s, page: page, c: httpClient(t)}
	// Every call the page made before the key is entered must have been
	// answered before the logs are cleared: the server line is written
	// once GET /v2 and /readyz are answered, the model line once the
	// selected model's metadata is, the last of the page's first calls.
	page.load(t, s.url+"/", `document.getElementById("body").value.includes('"model"') &&
		!document.getElementById("server").textContent.includes("connecting") &&
		document.getElementById("model-info").textContent.includes(" · inputs: ")`)
	p.js(playgroundHelpers, nil)
	auth.take()
	proto.take()

	const key = "sk-test.key_123"
	p.set("api-key", key) // reloads the server's metadata and models
	var calls []string
	waitFor(t, "the models to reload", func() bool {
		calls = append(calls, auth.take()...)
		return slices.ContainsFunc(calls, func(c string) bool { return strings.HasPrefix(c, "GET /v1/models:") })
	})
	for _, transport := range []string{"fetch", "ws"} {
		p.js(fmt.Sprintf("pgt.pick(%q, %q)", "transport", transport), nil)
		id := p.send()[0]
		if c := p.waitCard(id, "done", finished); c.State != "done" {
			t.Fatalf("%s: %+v", transport, c)
		}
	}
	var paths []string
	for _, r := range append(calls, auth.take()...) {
		path, value, _ := strings.Cut(r, ": ")
		paths = append(paths, path)
		// A browser cannot set headers on a WebSocket: the key goes in
		// its subprotocols, checked below.
		if value != "Bearer "+key && path != "GET /v1/ws" {
			t.Errorf("%s: Authorization %q", path, value)
		}
	}
	for _, want := range []string{"GET /v1/models", "POST /v2/repository/index", "POST /v1/chat/completions", "GET /v1/ws"} {
		if !slices.Contains(paths, want) {
			t.Errorf("no %s among the calls %q", want, paths)
		}
	}
	var ws []string
	for _, r := range proto.take() {
		if strings.HasPrefix(r, "GET /v1/ws:") {
			ws = append(ws, r)
		}
	}
	if len(ws) != 1 || ws[0] != "GET /v1/ws: streamgate.v1, streamgate.key."+key {
		t.Errorf("WebSocket handshakes %q", ws)
	}
}

// On a gateway that needs API keys, the playground says so in words
// (no raw 401 JSON), Send asks for the key instead of doing nothing, and
// once the key is in, echo paced by delay_ms streams token by token over
// fetch, WebSocket and EventSource: the card sees several arrivals (a
// rate), not one batch.
func TestPlaygroundNeedsKey(t *testing.T) {
	requireTool(t, "chromium", "/usr/bin/chromium")
	st := store.NewMemory()
	s := newStack(t, &gateway.Options{Store: st, Keys: st})
	key := addKey(t, st, "playground", store.Limit{})
	page := startChromium(t).openPage(t)
	p := &playground{t: t, s: s, page: page, c: httpClient(t)}
	const asks = "This gateway needs an API key: enter it in the API key box above."
	page.load(t, s.url+"/", `document.getElementById("model-info").textContent.includes("API key")`)
	p.js(playgroundHelpers, nil)
	var view struct{ Info, Server, KeyClass string }
	const read = `({info: document.getElementById("model-info").textContent, server: document.getElementById("server").textContent,
		keyClass: document.getElementById("api-key").className})`
	p.js(read, &view)
	if view.Info != asks || !strings.Contains(view.Server, "needs an API key") || strings.Contains(view.Server, "{") || view.KeyClass != "wanted" {
		t.Errorf("without a key: %+v", view)
	}
	var ids []string
	if p.js("pgt.send()", &ids); len(ids) != 0 {
		t.Errorf("Send without a key started %v", ids)
	}
	p.js(read, &view)
	if view.Info != asks {
		t.Errorf("Send without a key: %+v", view)
	}

	p.set("api-key", key)
	waitFor(t, "the models to load with the key", func() bool {
		var ok bool
		p.js(`[...document.getElementById("model").options].some((o) => o.value === "echo")`, &ok)
		return ok
	})
	p.set("model", "echo")
	p.set("prompt", "one two three four five six")
	p.set("delay-ms", "40")
	if b := p.body(); !strings.Contains(b, `"delay_ms": 40`) {
		t.Fatalf("body without delay_ms: %s", b)
	}
	// fetch first: its answer tells the page that streams are resumable,
	// which EventSource needs.
	for _, transport := range []string{"fetch", "ws", "eventsource"} {
		p.js(fmt.Sprintf("pgt.pick(%q, %q)", "transport", transport), nil)
		id := p.send()[0]
		c := p.waitCard(id, "done", finished)
		if c.State != "done" || c.Tokens < 6 || c.Rate == "–" || c.Bars == 0 || !strings.Contains(c.Text, "one two three four five six") {
			t.Errorf("%s: %+v", transport, c)
		}
	}
}
