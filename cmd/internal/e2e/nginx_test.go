package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// nginx is a running nginx in front of a gateway.
type nginx struct {
	addr string // host:port it listens on
	url  string // http://addr
	dir  string // its files: access.log
}

var (
	upstreamBlockRE = regexp.MustCompile(`(?s)\bupstream\s+[\w.-]+\s*\{.*?\}`)
	upstreamAddrRE  = regexp.MustCompile(`(\bserver\s+)[^\s;]+`)
	listenRE        = regexp.MustCompile(`(?m)^(\s*)listen\s+[^;]*;[^\n]*\n?`)
	httpBlockRE     = regexp.MustCompile(`(?m)^\s*http\s*\{`)
	userRE          = regexp.MustCompile(`(?m)^\s*user\s`)
	accessLogRE     = regexp.MustCompile(`\baccess_log\s+[^\s;]+`)
)

// renderNginxConf is the shipped configuration with only what differs in
// a test put in: the upstream servers become the gateway under test, the
// server listens on listen, and temporary files and the access log go to
// dir. Every other directive is tested as shipped.
func renderNginxConf(conf, gatewayAddr, listen, dir string) (string, error) {
	blocks := upstreamBlockRE.FindAllStringIndex(conf, -1)
	if len(blocks) != 1 {
		return "", fmt.Errorf("want one upstream block, found %d", len(blocks))
	}
	b := blocks[0]
	block := conf[b[0]:b[1]]
	if !upstreamAddrRE.MatchString(block) {
		return "", fmt.Errorf("no server in the upstream block %q", block)
	}
	conf = conf[:b[0]] + upstreamAddrRE.ReplaceAllString(block, "${1}"+gatewayAddr) + conf[b[1]:]

	listens := listenRE.FindAllStringSubmatchIndex(conf, -1)
	if len(listens) == 0 {
		return "", fmt.Errorf("no listen directive")
	}
	// The first listen becomes ours; others (e.g. an IPv6 twin) go.
	for i := len(listens) - 1; i >= 0; i-- {
		l := listens[i]
		repl := ""
		if i == 0 {
			repl = conf[l[2]:l[3]] + "listen " + listen + ";\n"
		}
		conf = conf[:l[0]] + repl + conf[l[1]:]
	}

	return nginxTempPaths(conf, dir)
}

// nginxTempPaths puts nginx's temporary files and access log in dir.
func nginxTempPaths(conf, dir string) (string, error) {
	var paths strings.Builder
	for _, d := range []string{"client_body", "proxy", "fastcgi", "uwsgi", "scgi"} {
		fmt.Fprintf(&paths, "\n  %s_temp_path %s;", d, filepath.Join(dir, d+"_temp"))
	}
	logPath := filepath.Join(dir, "access.log")
	if accessLogRE.MatchString(conf) { // the shipped log, in its format, written here
		conf = accessLogRE.ReplaceAllLiteralString(conf, "access_log "+logPath)
	} else {
		fmt.Fprintf(&paths, "\n  access_log %s;", logPath)
	}
	loc := httpBlockRE.FindStringIndex(conf)
	if loc == nil {
		return "", fmt.Errorf("no http block")
	}
	return conf[:loc[1]] + paths.String() + conf[loc[1]:], nil
}

// startNginx runs nginx in the foreground with the shipped configuration
// (or STREAMGATE_E2E_NGINX_CONF) in front of the gateway at gatewayAddr.
func startNginx(t *testing.T, gatewayAddr string) *nginx {
	t.Helper()
	bin := requireTool(t, "nginx", "/usr/sbin/nginx")
	src := os.Getenv("STREAMGATE_E2E_NGINX_CONF")
	if src == "" {
		src = filepath.Join(moduleRoot(t), "deploy", "nginx.conf")
	}
	shipped, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	addr := freeAddr(t)
	conf, err := renderNginxConf(string(shipped), gatewayAddr, addr, dir)
	if err != nil {
		t.Fatalf("%s: %v (update renderNginxConf with the file)", src, err)
	}
	n := &nginx{addr: addr, url: "http://" + addr, dir: dir}
	runNginx(t, bin, src, conf, dir, httpClient(t), n.url+"/healthz")
	return n
}

// runNginx runs nginx in the foreground with conf (rendered from src) in
// dir until the test ends, and returns once c gets 200 from ready.
func runNginx(t *testing.T, bin, src, conf, dir string, c *http.Client, ready string) {
	t.Helper()
	confPath := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	global := "daemon off; pid " + filepath.Join(dir, "nginx.pid") + "; error_log stderr info;"
	if os.Geteuid() == 0 && !userRE.MatchString(conf) {
		// As root, workers would switch to nobody, who cannot enter the
		// test's private temp directory.
		global += " user root;"
	}
	cmd := exec.Command(bin, "-e", "stderr", "-p", dir+"/", "-c", confPath, "-g", global)
	// SIGQUIT is nginx's graceful stop: it lets workers close their
	// connections before they exit.
	p := startProcess(t, "nginx", cmd, syscall.SIGQUIT)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("rendered %s:\n%s", src, conf)
		}
	})
	deadline := time.Now().Add(waitHang)
	for {
		if p.exited() {
			t.Fatalf("nginx exited at start:\n%s", p.out.String())
		}
		resp, err := c.Get(ready)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("nginx never proxied %s: %v", ready, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestNginxSSE runs the streaming routes through nginx configured by
// deploy/nginx.conf, against the engine and gateway of `streamgate serve`.
// deploy/nginx.conf's access log leaves query strings out: an
// EventSource's API key (?token=) on /v1/streams is never written.
func TestNginxLogsNoQuery(t *testing.T) {
	s := newStack(t, nil)
	ng := startNginx(t, s.addr)
	resp, err := httpClient(t).Get(ng.url + "/v1/streams/nope?token=sg-secret-in-query&last_event_id=3")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var log []byte
	waitFor(t, "the request in the access log", func() bool {
		log, _ = os.ReadFile(filepath.Join(ng.dir, "access.log"))
		return strings.Contains(string(log), "/v1/streams/nope")
	})
	if strings.Contains(string(log), "sg-secret") || strings.Contains(string(log), "token=") {
		t.Errorf("the access log has the query string:\n%s", log)
	}
}

func TestNginxSSE(t *testing.T) {
	requireTool(t, "nginx", "/usr/sbin/nginx")
	s := startStack(t)
	ng := startNginx(t, s.addr)
	c := httpClient(t)

	// Events reach the client as the engine produces them: the first n
	// are read while the stream is open, the rest a minute apart (a proxy
	// that buffered the stream would deliver nothing before its end, ten
	// minutes away).
	t.Run("generate_stream unbuffered", func(t *testing.T) {
		const n, delay = 8, 50 // ms
		ctx, leave := context.WithTimeout(t.Context(), waitHang)
		defer leave()
		resp := post(t, ctx, c, ng.url+"/v2/models/repeat_int32/generate_stream", repeatTailBody(n, 40, delay))
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(resp.Body)
			t.Fatalf("status %d: %s", resp.StatusCode, b)
		}
		for h, want := range map[string]string{
			"Content-Type":     "text/event-stream; charset=utf-8",
			"Cache-Control":    "no-cache",
			"Content-Encoding": "",
		} {
			if got := resp.Header.Get(h); got != want {
				t.Errorf("header %s = %q through nginx, want %q", h, got, want)
			}
		}
		if got := resp.Header.Get("X-Accel-Buffering"); got != "no" {
			t.Errorf("header X-Accel-Buffering = %q through nginx, want \"no\": nginx consumes X-Accel-* headers "+
				"unless told otherwise, so a proxy in front of this nginx would buffer the stream "+
				"(deploy/nginx.conf needs `proxy_pass_header X-Accel-Buffering;`)", got)
		}
		r := newSSEReader(resp.Body)
		for i := range n {
			ev, err := r.next()
			if err != nil {
				t.Fatalf("event %d of the open stream through nginx (buffered?): %v", i, err)
			}
			want := fmt.Sprintf(`{"model_name":"repeat_int32","model_version":"1","OUT":%d,"IDX":%d}`, 40+i, i)
			if ev.ID != strconv.Itoa(i+1) || ev.Data != want {
				t.Errorf("event %d: id %q data %s, want id %d data %s", i, ev.ID, ev.Data, i+1, want)
			}
		}
		if busy := s.eng.InFlight(); busy != 1 {
			t.Errorf("after %d events the engine runs %d requests, want 1 (still producing the rest)", n, busy)
		}
		leave()
		waitFor(t, "the request the client left to stop in the engine", func() bool { return s.eng.InFlight() == 0 })
	})

	t.Run("openai chat stream", func(t *testing.T) {
		resp := post(t, t.Context(), c, ng.url+"/v1/chat/completions",
			`{"model":"echo","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hello through nginx"}]}`)
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream; charset=utf-8" {
			b, _ := io.ReadAll(resp.Body)
			t.Fatalf("status %d, Content-Type %q: %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
		}
		var data []string
		r := newSSEReader(resp.Body)
		for {
			ev, err := r.next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			data = append(data, ev.Data)
		}
		checkChatStream(t, data, "hello through nginx")
	})

	// A non-browser client (no Origin), e.g. a mobile app: three requests
	// at once on one socket.
	t.Run("websocket three concurrent requests", func(t *testing.T) {
		ws, _, err := websocket.Dial(t.Context(), "ws://"+ng.addr+"/v1/ws", &websocket.DialOptions{
			Subprotocols: []string{"streamgate.v1"},
			HTTPClient:   c,
		})
		if err != nil {
			t.Fatal(err)
		}
		defer ws.CloseNow()
		if ws.Subprotocol() != "streamgate.v1" {
			t.Fatalf("subprotocol %q", ws.Subprotocol())
		}
		const n, delay = 4, 300
		ids := []string{"g0", "g1", "g2"}
		for i, id := range ids {
			frame := `{"type":"generate","id":"` + id + `","model":"repeat_int32","body":` + repeatBody(n, 10*i, delay, delay) + `}`
			if err := ws.Write(t.Context(), websocket.MessageText, []byte(frame)); err != nil {
				t.Fatal(err)
			}
		}
		seqs := map[string]int{}
		ended := map[string]string{}
		dataBeforeFirstEnd := -1
		for len(ended) < len(ids) {
			_, raw, err := ws.Read(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			var f struct {
				Type, ID, Reason string
				Seq              int
				Data             json.RawMessage
			}
			if err := json.Unmarshal(raw, &f); err != nil {
				t.Fatalf("frame %s: %v", raw, err)
			}
			i := slices.Index(ids, f.ID)
			if i < 0 || ended[f.ID] != "" {
				t.Fatalf("unexpected frame %s (ended: %v)", raw, ended)
			}
			switch f.Type {
			case "data":
				want := fmt.Sprintf(`{"model_name":"repeat_int32","model_version":"1","OUT":%d,"IDX":%d}`, 10*i+seqs[f.ID], seqs[f.ID])
				if f.Seq != seqs[f.ID] || string(f.Data) != want {
					t.Fatalf("frame %s, want seq %d data %s", raw, seqs[f.ID], want)
				}
				seqs[f.ID]++
			case "done":
				if dataBeforeFirstEnd < 0 {
					dataBeforeFirstEnd = 0
					for _, id := range ids {
						if seqs[id] > 0 {
							dataBeforeFirstEnd++
						}
					}
				}
				ended[f.ID] = f.Reason
			default:
				t.Fatalf("frame %s", raw)
			}
		}
		for _, id := range ids {
			if seqs[id] != n || ended[id] != "final" {
				t.Errorf("%s: %d data frames, ended %q; want %d, final", id, seqs[id], ended[id], n)
			}
		}
		if dataBeforeFirstEnd != len(ids) {
			t.Errorf("only %d of the requests had data before the first one ended: not concurrent", dataBeforeFirstEnd)
		}
		if err := ws.Close(websocket.StatusNormalClosure, ""); err != nil {
			t.Errorf("close: %v", err)
		}
	})

	// A page served through this nginx opens /v1/ws with its own origin,
	// which the gateway accepts only when it sees the Host the browser
	// used.
	t.Run("websocket from a same-origin page", func(t *testing.T) {
		ws, resp, err := websocket.Dial(t.Context(), "ws://"+ng.addr+"/v1/ws", &websocket.DialOptions{
			Subprotocols: []string{"streamgate.v1"},
			HTTPHeader:   http.Header{"Origin": {ng.url}},
			HTTPClient:   c,
		})
		if err != nil {
			var body string
			if resp != nil && resp.Body != nil {
				b, _ := io.ReadAll(resp.Body)
				body = string(b)
			}
			t.Fatalf("same-origin WebSocket through nginx refused: %v %q\n"+
				"nginx sends `Host: $host`, which drops the port the browser used, so the gateway's "+
				"origin check (Origin host:port == Host) fails for any port but 80; "+
				"deploy/nginx.conf needs `proxy_set_header Host $http_host;`", err, body)
		}
		defer ws.CloseNow()
		if err := ws.Write(t.Context(), websocket.MessageText, []byte(`{"type":"generate","id":"sq","model":"square_int32","body":{"IN":2}}`)); err != nil {
			t.Fatal(err)
		}
		var got []string
		for len(got) < 3 {
			_, raw, err := ws.Read(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, string(raw))
		}
		want := []string{
			`{"type":"data","id":"sq","seq":0,"data":{"model_name":"square_int32","model_version":"1","OUT":2}}`,
			`{"type":"data","id":"sq","seq":1,"data":{"model_name":"square_int32","model_version":"1","OUT":2}}`,
			`{"type":"done","id":"sq","reason":"final"}`,
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("frames\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		ws.Close(websocket.StatusNormalClosure, "")
	})

	// A client that goes away mid-stream makes nginx close its upstream
	// connection, and the gateway cancels the engine's work at once.
	t.Run("client disconnect cancels upstream", func(t *testing.T) {
		waitFor(t, "engine idle", func() bool { return s.eng.InFlight() == 0 })
		goneBefore := metric(t, c, s.url, `streamgate_gateway_client_gone_total{protocol="sse"}`)
		cancelsBefore := metric(t, c, s.url, `streamgate_upstream_cancels_total{mode="inband"}`)
		// 100 responses a second apart: ~100s of work that only
		// cancellation ends within the test.
		ctx, disconnect := context.WithCancel(t.Context())
		defer disconnect()
		resp := post(t, ctx, c, ng.url+"/v2/models/repeat_int32/generate_stream", repeatBody(100, 0, 10, 1000))
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d", resp.StatusCode)
		}
		if _, err := newSSEReader(resp.Body).next(); err != nil {
			t.Fatal(err)
		}
		if n := s.eng.InFlight(); n != 1 {
			t.Fatalf("engine runs %d requests after the first event, want 1", n)
		}
		disconnect()
		resp.Body.Close()
		waitFor(t, "the engine to stop the abandoned request", func() bool { return s.eng.InFlight() == 0 })
		waitFor(t, "client_gone and in-band cancel metrics", func() bool {
			return metric(t, c, s.url, `streamgate_gateway_client_gone_total{protocol="sse"}`) == goneBefore+1 &&
				metric(t, c, s.url, `streamgate_upstream_cancels_total{mode="inband"}`) >= cancelsBefore+1
		})

		// The next request through the same nginx works.
		resp = post(t, t.Context(), c, ng.url+"/v2/models/repeat_int32/generate_stream", repeatBody(2, 5, 1, 1))
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		want := "id: 1\ndata: {\"model_name\":\"repeat_int32\",\"model_version\":\"1\",\"OUT\":5,\"IDX\":0}\n\n" +
			"id: 2\ndata: {\"model_name\":\"repeat_int32\",\"model_version\":\"1\",\"OUT\":6,\"IDX\":1}\n\n"
		if resp.StatusCode != http.StatusOK || string(b) != want {
			t.Errorf("after the disconnect: %d %q, want 200 %q", resp.StatusCode, b, want)
		}
	})
}

// checkChatStream checks the data payloads of an OpenAI chat stream from
// the echo model with include_usage: a role chunk, the prompt's words as
// content, a finish chunk, a usage chunk, then [DONE] last.
func checkChatStream(t *testing.T, data []string, content string) {
	t.Helper()
	if len(data) < 5 || data[len(data)-1] != "[DONE]" {
		t.Fatalf("chat stream %q: want chunks then data: [DONE] last", data)
	}
	type chunk struct {
		ID, Object, Model string
		Choices           []struct {
			Index int
			Delta struct {
				Role    string
				Content *string
			}
			FinishReason *string `json:"finish_reason"`
		}
		Usage *struct {
			PromptTokens     int `json:"prompt_tokens"`
			CompletionTokens int `json:"completion_tokens"`
			TotalTokens      int `json:"total_tokens"`
		}
	}
	chunks := make([]chunk, len(data)-1)
	for i, d := range data[:len(data)-1] {
		if err := json.Unmarshal([]byte(d), &chunks[i]); err != nil {
			t.Fatalf("chunk %d %s: %v", i, d, err)
		}
		if c := chunks[i]; c.Object != "chat.completion.chunk" || c.Model != "echo" || c.ID != chunks[0].ID || c.ID == "" {
			t.Errorf("chunk %d: %s", i, d)
		}
	}
	first, usage, finish := chunks[0], chunks[len(chunks)-1], chunks[len(chunks)-2]
	if len(first.Choices) != 1 || first.Choices[0].Delta.Role != "assistant" {
		t.Errorf("first chunk %s, want the assistant role", data[0])
	}
	var text strings.Builder
	for i, c := range chunks[1 : len(chunks)-2] {
		if len(c.Choices) != 1 || c.Choices[0].Delta.Content == nil || c.Choices[0].FinishReason != nil {
			t.Errorf("content chunk %d: %s", i+1, data[i+1])
			continue
		}
		text.WriteString(*c.Choices[0].Delta.Content)
	}
	if want := "user: " + content + "\nassistant:"; strings.Join(strings.Fields(text.String()), " ") != strings.Join(strings.Fields(want), " ") {
		t.Errorf("content %q, want the echoed prompt %q", text.String(), want)
	}
	if len(finish.Choices) != 1 || finish.Choices[0].FinishReason == nil || *finish.Choices[0].FinishReason != "stop" {
		t.Errorf("finish chunk %s, want finish_reason stop", data[len(data)-3])
	}
	if len(usage.Choices) != 0 || usage.Usage == nil || usage.Usage.CompletionTokens == 0 ||
		usage.Usage.TotalTokens != usage.Usage.PromptTokens+usage.Usage.CompletionTokens {
		t.Errorf("usage chunk %s", data[len(data)-2])
	}
}
