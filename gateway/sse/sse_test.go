package sse

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var eventCases = []struct {
	name string
	id   uint64
	data string
	want string
}{
	{"json", 0, `{"a":1}`, "id: 0\ndata: {\"a\":1}\n\n"},
	{"empty", 7, ``, "id: 7\ndata: \n\n"},
	{"done", 12, `[DONE]`, "id: 12\ndata: [DONE]\n\n"},
	{"lf", 1, "a\nb", "id: 1\ndata: a\ndata: b\n\n"},
	{"crlf", 1, "a\r\nb", "id: 1\ndata: a\ndata: b\n\n"},
	{"cr", 1, "a\rb\n", "id: 1\ndata: a\ndata: b\ndata: \n\n"},
	{"colon", 2, ": not a comment", "id: 2\ndata: : not a comment\n\n"},
	{"lf last", 3, "ab\n", "id: 3\ndata: ab\ndata: \n\n"},
	{"cr only", 4, "\r", "id: 4\ndata: \ndata: \n\n"},
}

func TestAppendEvent(t *testing.T) {
	for _, tc := range eventCases {
		t.Run(tc.name, func(t *testing.T) {
			got := string(AppendEvent(nil, tc.id, []byte(tc.data)))
			if got != tc.want {
				t.Fatalf("AppendEvent = %q, want %q", got, tc.want)
			}
		})
	}
}

func FuzzEventRoundTrip(f *testing.F) {
	for _, tc := range eventCases {
		f.Add(tc.id, tc.data)
	}
	f.Fuzz(func(t *testing.T, id uint64, data string) {
		raw := AppendEvent(nil, id, []byte(data))
		r := NewReader(bytes.NewReader(raw))
		ev, err := r.Next()
		if err != nil {
			t.Fatalf("Next: %v on %q", err, raw)
		}
		norm := strings.ReplaceAll(strings.ReplaceAll(data, "\r\n", "\n"), "\r", "\n")
		if ev.Data != norm || ev.ID != strings.TrimSpace(string(raw[4:bytes.IndexByte(raw, '\n')])) {
			t.Fatalf("round trip of %q gave %+v", data, ev)
		}
		if _, err := r.Next(); err != io.EOF {
			t.Fatalf("second Next: %v", err)
		}
	})
}

// recorder is an http.ResponseWriter that remembers what each flush
// delivered.
type recorder struct {
	mu      sync.Mutex
	header  http.Header
	status  int
	pending bytes.Buffer
	flushes []string
	failAt  int // fail writes once this many flushes happened; 0 = never
}

func newRecorder() *recorder { return &recorder{header: http.Header{}} }

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) WriteHeader(code int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.status = code
}
func (r *recorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.failAt > 0 && len(r.flushes) >= r.failAt {
		return 0, errors.New("broken pipe")
	}
	return r.pending.Write(p)
}
func (r *recorder) Flush() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.flushes = append(r.flushes, r.pending.String())
	r.pending.Reset()
}
func (r *recorder) snapshot() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.flushes...)
}

func TestWriterHeadersKeepAliveAndEvents(t *testing.T) {
	rec := newRecorder()
	w := NewWriter(rec, &Options{KeepAlive: 15 * time.Second})
	if w.KeepAliveInterval() != 15*time.Second {
		t.Fatalf("KeepAliveInterval %v", w.KeepAliveInterval())
	}
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	if got := rec.snapshot(); len(got) != 1 || got[0] != "" || rec.status != http.StatusOK {
		t.Fatalf("after start: flushes %q status %d, want one empty header flush", got, rec.status)
	}
	if ct := rec.header.Get("Content-Type"); ct != "text/event-stream; charset=utf-8" {
		t.Fatalf("Content-Type %q", ct)
	}
	if rec.header.Get("Cache-Control") != "no-cache" || rec.header.Get("X-Accel-Buffering") != "no" {
		t.Fatalf("headers %v", rec.header)
	}
	if err := w.KeepAlive(); err != nil {
		t.Fatal(err)
	}
	if got := rec.snapshot(); len(got) != 2 || got[1] != KeepAliveComment {
		t.Fatalf("after keepalive: %q", got)
	}
	w.Append([]byte(`{"x":1}`))
	if w.Buffered() == 0 || len(rec.snapshot()) != 2 {
		t.Fatal("Append wrote before Flush")
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := rec.snapshot(); len(got) != 3 || got[2] != "id: 1\ndata: {\"x\":1}\n\n" || w.Buffered() != 0 {
		t.Fatalf("after event: %q", got)
	}
	if err := w.Flush(); err != nil || len(rec.snapshot()) != 3 {
		t.Fatalf("empty Flush wrote: %v %q", err, rec.snapshot())
	}
	if NewWriter(rec, &Options{KeepAlive: -1}).KeepAliveInterval() != 0 {
		t.Fatal("disabled keepalive has an interval")
	}
}

func TestWriterBatchesAppendedEvents(t *testing.T) {
	rec := newRecorder()
	w := NewWriter(rec, &Options{KeepAlive: -1})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		w.Append([]byte{'a' + byte(i)})
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	got := rec.snapshot()
	want := []string{"", "id: 1\ndata: a\n\nid: 2\ndata: b\n\nid: 3\ndata: c\n\nid: 4\ndata: d\n\nid: 5\ndata: e\n\n"}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("flushes %q, want %q", got, want)
	}
}

// Events appended before Start go out with the headers, in one write
// and one flush.
func TestWriterStartSendsAppendedEvents(t *testing.T) {
	rec := newRecorder()
	w := NewWriter(rec, &Options{KeepAlive: -1})
	w.Append([]byte("a"))
	w.Append([]byte("b"))
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	if got := rec.snapshot(); len(got) != 1 || got[0] != "id: 1\ndata: a\n\nid: 2\ndata: b\n\n" || rec.status != http.StatusOK {
		t.Fatalf("flushes %q status %d, want the two events in one", got, rec.status)
	}
	if rec.header.Get("Content-Type") != "text/event-stream; charset=utf-8" || w.Buffered() != 0 {
		t.Fatalf("headers %v, %d bytes still buffered", rec.header, w.Buffered())
	}
	if err := w.Flush(); err != nil || len(rec.snapshot()) != 1 {
		t.Fatalf("Flush after Start wrote again: %v %q", err, rec.snapshot())
	}
}

// The headers' values are shared between responses: adding to one
// response's does not change another's.
func TestSetHeadersShared(t *testing.T) {
	a, b := http.Header{}, http.Header{}
	SetHeaders(a)
	SetHeaders(b)
	a.Add("Cache-Control", "no-store")
	if got := b.Values("Cache-Control"); len(got) != 1 || got[0] != "no-cache" {
		t.Fatalf("the other response's Cache-Control: %q", got)
	}
	c := http.Header{"Content-Length": {"3"}, "Content-Encoding": {"gzip"}}
	SetHeaders(c)
	if c.Get("Content-Length") != "" || c.Get("Content-Encoding") != "" {
		t.Fatalf("headers %v", c)
	}
}

func TestWriterWriteErrorStops(t *testing.T) {
	rec := newRecorder()
	rec.failAt = 1
	w := NewWriter(rec, nil)
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	w.Append([]byte("x"))
	if err := w.Flush(); err == nil {
		t.Fatal("Flush returned nil after a write error")
	}
	w.Append([]byte("y"))
	if err := w.Flush(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Flush after a failed write = %v", err)
	}
	if err := w.KeepAlive(); !errors.Is(err, ErrClosed) {
		t.Fatalf("KeepAlive after a failed write = %v", err)
	}
}

func TestReaderComments(t *testing.T) {
	body := ": keepalive\n\nid: 1\ndata: {}\n\n: keepalive\n\nid: 2\ndata: [DONE]\n\n"
	r := NewReader(strings.NewReader(body))
	var got []string
	for {
		ev, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if ev.IsComment {
			got = append(got, "#"+ev.Comment)
		} else {
			got = append(got, ev.ID+"="+ev.Data)
		}
	}
	want := "#keepalive 1={} #keepalive 2=[DONE]"
	if strings.Join(got, " ") != want {
		t.Fatalf("got %q, want %q", strings.Join(got, " "), want)
	}
	if f := Frames([]byte(body)); len(f) != 4 || f[1] != "id: 1\ndata: {}\n\n" {
		t.Fatalf("Frames = %q", f)
	}
}

// After Abort every write fails, whatever the write timeout.
// TestQuietStreamOverHTTP2: a stream quiet for longer than the write
// timeout, keepalives off, is not cut over HTTP/2, where a stream's write
// deadline is a timer that resets the stream when it fires.
func TestQuietStreamOverHTTP2(t *testing.T) {
	const timeout = 50 * time.Millisecond
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		w := NewWriter(rw, &Options{KeepAlive: -1, WriteTimeout: timeout})
		if w.Start() != nil {
			return
		}
		for i := range 2 {
			if i > 0 {
				time.Sleep(4 * timeout) // quiet, as between two slow tokens
			}
			w.Append([]byte(`{}`))
			if w.Flush() != nil {
				return
			}
		}
	}))
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	defer srv.Close()
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	defer tr.CloseIdleConnections()

	resp, err := (&http.Client{Transport: tr}).Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if resp.ProtoMajor != 2 || err != nil || string(body) != "id: 1\ndata: {}\n\nid: 2\ndata: {}\n\n" {
		t.Fatalf("%s: body %q, %v", resp.Proto, body, err)
	}
}

func TestAbort(t *testing.T) {
	w := NewWriter(httptest.NewRecorder(), &Options{WriteTimeout: -1})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	w.Append([]byte(`{}`))
	w.Abort()
	if err := w.Flush(); err != ErrClosed {
		t.Fatalf("Flush after Abort = %v", err)
	}
	if err := w.KeepAlive(); err != ErrClosed {
		t.Fatalf("KeepAlive after Abort = %v", err)
	}
}

// TestWriterLayout: what every event and FlushNow touch lies in the
// Writer's first 40 bytes, which a sink that embeds it keeps in one
// cache line with its own state (core's TestSSESinkLayout).
func TestWriterLayout(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("the layout is tuned for 64-bit builds")
	}
	var w Writer
	for name, end := range map[string]uintptr{
		"buf":    unsafe.Offsetof(w.buf) + unsafe.Sizeof(w.buf),
		"nextID": unsafe.Offsetof(w.nextID) + unsafe.Sizeof(w.nextID),
		"now":    unsafe.Offsetof(w.now) + unsafe.Sizeof(w.now),
		"failed": unsafe.Offsetof(w.failed) + unsafe.Sizeof(w.failed),
		"owed":   unsafe.Offsetof(w.owed) + unsafe.Sizeof(w.owed),
	} {
		if end > 40 {
			t.Errorf("Writer.%s ends at byte %d, past the first 40", name, end)
		}
	}
}
