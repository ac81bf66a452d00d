package e2e

// Headless Chromium driven over the DevTools protocol.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/coder/websocket"
)

// chromium is a headless Chromium with the DevTools protocol on a
// loopback port.
type chromium struct {
	proc    *process
	devtool string // http://127.0.0.1:port
}

// startChromium starts a headless Chromium with a profile of its own and
// args added to its command line.
func startChromium(t *testing.T, args ...string) *chromium {
	t.Helper()
	bin := requireTool(t, "chromium", "/usr/bin/chromium")
	profile := t.TempDir()
	args = append([]string{
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-dev-shm-usage", "--disable-breakpad",
		"--user-data-dir=" + profile,
		"--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
	}, args...)
	cmd := exec.Command(bin, append(args, "about:blank")...)
	// With --disable-dev-shm-usage Chromium keeps its shared memory in
	// files under TMPDIR and leaves them behind when it is stopped: keep
	// them in a directory of the test's own, removed after it. Its path is
	// short: Chromium puts its singleton's Unix socket there, and a
	// socket's path has at most 107 bytes (t.TempDir's are longer).
	tmp, err := os.MkdirTemp("", "chromium")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	p := startProcess(t, "chromium", cmd, syscall.SIGTERM)
	p.noise = "dbus" // no system bus in CI containers: harmless, and many lines
	// Chromium writes the port it chose to DevToolsActivePort.
	var port int
	waitFor(t, "chromium's DevToolsActivePort", func() bool {
		if p.exited() {
			t.Fatalf("chromium exited at start:\n%s", tail(p.out.String(), 8<<10))
		}
		data, err := os.ReadFile(filepath.Join(profile, "DevToolsActivePort"))
		if err != nil {
			return false
		}
		line, _, _ := strings.Cut(string(data), "\n")
		port, err = strconv.Atoi(strings.TrimSpace(line))
		return err == nil && port > 0
	})
	return &chromium{proc: p, devtool: fmt.Sprintf("http://127.0.0.1:%d", port)}
}

// openPage connects to the browser's page target over the DevTools
// protocol, with the Runtime, Page and Log domains enabled (console
// messages and exceptions are recorded).
func (b *chromium) openPage(t *testing.T) *cdp {
	t.Helper()
	c := httpClient(t)
	var wsURL string
	waitFor(t, "chromium's page target", func() bool {
		resp, err := c.Get(b.devtool + "/json/list")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var targets []struct{ Type, WebSocketDebuggerURL string }
		if json.NewDecoder(resp.Body).Decode(&targets) != nil {
			return false
		}
		for _, tg := range targets {
			if tg.Type == "page" && tg.WebSocketDebuggerURL != "" {
				wsURL = tg.WebSocketDebuggerURL
				return true
			}
		}
		return false
	})
	page := dialCDP(t, wsURL)
	for _, method := range []string{"Runtime.enable", "Page.enable", "Log.enable"} {
		if err := page.call(t.Context(), method, map[string]any{}, nil); err != nil {
			t.Fatal(err)
		}
	}
	return page
}

// cdp is a minimal Chrome DevTools protocol client for one target.
type cdp struct {
	conn    *websocket.Conn
	console *syncBuffer // console messages and uncaught exceptions of the page

	mu       sync.Mutex
	nextID   int64
	pending  map[int64]chan cdpMessage
	err      error    // set when the reader stopped
	problems []string // errors and warnings the page logged, exceptions it threw
	done     chan struct{}
}

type cdpMessage struct {
	ID     int64           `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func dialCDP(t *testing.T, url string) *cdp {
	t.Helper()
	conn, _, err := websocket.Dial(t.Context(), url, &websocket.DialOptions{HTTPClient: httpClient(t)})
	if err != nil {
		t.Fatalf("DevTools %s: %v", url, err)
	}
	conn.SetReadLimit(64 << 20)
	c := &cdp{conn: conn, console: &syncBuffer{}, pending: map[int64]chan cdpMessage{}, done: make(chan struct{})}
	go c.read()
	t.Cleanup(func() {
		conn.CloseNow()
		<-c.done
		if t.Failed() {
			t.Logf("page console:\n%s", tail(c.console.String(), 8<<10))
		}
	})
	return c
}

func (c *cdp) read() {
	defer close(c.done)
	for {
		_, data, err := c.conn.Read(context.Background())
		if err != nil {
			c.mu.Lock()
			c.err = err
			for id, ch := range c.pending {
				close(ch)
				delete(c.pending, id)
			}
			c.mu.Unlock()
			return
		}
		var m cdpMessage
		if json.Unmarshal(data, &m) != nil {
			continue
		}
		if m.ID != 0 {
			c.mu.Lock()
			ch := c.pending[m.ID]
			delete(c.pending, m.ID)
			c.mu.Unlock()
			if ch != nil {
				ch <- m
			}
			continue
		}
		switch m.Method {
		case "Runtime.consoleAPICalled", "Runtime.exceptionThrown", "Log.entryAdded":
			fmt.Fprintf(c.console, "%s %s\n", m.Method, m.Params)
			if isProblem(m) {
				c.mu.Lock()
				c.problems = append(c.problems, fmt.Sprintf("%s %s", m.Method, m.Params))
				c.mu.Unlock()
			}
		}
	}
}

// isProblem reports whether a console or log message is an error or a
// warning: an uncaught exception, console.error/warn/assert, or a browser
// log entry (network failure, CSP violation, ...) at level error/warning.
func isProblem(m cdpMessage) bool {
	var p struct {
		Type  string `json:"type"`
		Entry struct {
			Level string `json:"level"`
		} `json:"entry"`
	}
	_ = json.Unmarshal(m.Params, &p)
	switch m.Method {
	case "Runtime.exceptionThrown":
		return true
	case "Runtime.consoleAPICalled":
		return p.Type == "error" || p.Type == "warning" || p.Type == "assert"
	default:
		return p.Entry.Level == "error" || p.Entry.Level == "warning"
	}
}

// takeProblems returns the problems logged since the last call.
func (c *cdp) takeProblems() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.problems
	c.problems = nil
	return p
}

// call sends one command and decodes its result into out (if not nil).
func (c *cdp) call(ctx context.Context, method string, params, out any) error {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return c.err
	}
	c.nextID++
	id := c.nextID
	ch := make(chan cdpMessage, 1)
	c.pending[id] = ch
	c.mu.Unlock()
	msg, err := json.Marshal(map[string]any{"id": id, "method": method, "params": params})
	if err != nil {
		return err
	}
	if err := c.conn.Write(ctx, websocket.MessageText, msg); err != nil {
		return err
	}
	select {
	case m, ok := <-ch:
		if !ok {
			return fmt.Errorf("%s: DevTools connection lost: %v", method, c.err)
		}
		if m.Error != nil {
			return fmt.Errorf("%s: %d %s", method, m.Error.Code, m.Error.Message)
		}
		if out != nil {
			return json.Unmarshal(m.Result, out)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%s: %w", method, ctx.Err())
	}
}

// eval runs a JavaScript expression in the page, awaits its promise and
// decodes its value into out.
func (c *cdp) eval(t *testing.T, expr string, out any) {
	t.Helper()
	if err := c.evalErr(t, expr, out); err != nil {
		t.Fatal(err)
	}
}

func (c *cdp) evalErr(t *testing.T, expr string, out any) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitHang)
	defer cancel()
	var res struct {
		Result struct {
			Type  string          `json:"type"`
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct {
			Text      string `json:"text"`
			Exception struct {
				Description string `json:"description"`
			} `json:"exception"`
		} `json:"exceptionDetails"`
	}
	err := c.call(ctx, "Runtime.evaluate", map[string]any{
		"expression": expr, "awaitPromise": true, "returnByValue": true,
	}, &res)
	if err != nil {
		return fmt.Errorf("%s: %v", expr, err)
	}
	if e := res.ExceptionDetails; e != nil {
		return fmt.Errorf("%s threw: %s %s", expr, e.Text, e.Exception.Description)
	}
	if out != nil {
		if err := json.Unmarshal(res.Result.Value, out); err != nil {
			return fmt.Errorf("%s returned %s %s: %v", expr, res.Result.Type, res.Result.Value, err)
		}
	}
	return nil
}

// navigate loads url and waits until the page's script has run.
func (c *cdp) navigate(t *testing.T, url string) {
	t.Helper()
	c.load(t, url, `typeof window.e2e === "object"`)
}

// load loads url and waits until the JavaScript expression ready holds.
func (c *cdp) load(t *testing.T, url, ready string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitHang)
	defer cancel()
	var nav struct {
		ErrorText string `json:"errorText"`
	}
	if err := c.call(ctx, "Page.navigate", map[string]any{"url": url}, &nav); err != nil {
		t.Fatal(err)
	}
	if nav.ErrorText != "" {
		t.Fatalf("navigate %s: %s", url, nav.ErrorText)
	}
	waitFor(t, "the page to load", func() bool {
		var ok bool
		err := c.evalErr(t, `document.readyState === "complete" && location.href === `+strconv.Quote(url)+` && (`+ready+`)`, &ok)
		return err == nil && ok
	})
}
