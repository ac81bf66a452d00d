package detach

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/streamgate/streamgate/upstream/rawsock"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// server serves h on a loopback port with a Listener for hand-backs
// beside it; h detaches every request and writes it with write, on a
// goroutine of its own.
type server struct {
	url  string
	back *Listener
	// mu orders every handler's wg.Go (made while its connection still
	// counts as active for Shutdown) before the cleanup's wg.Wait.
	mu sync.Mutex
	wg sync.WaitGroup
}

func newServer(t *testing.T, write func(d *Response, r *http.Request)) *server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &server{url: "http://" + ln.Addr().String(), back: NewListener(ln.Addr())}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("X-Before", "kept")
		s.mu.Lock()
		defer s.mu.Unlock()
		d, err := Hijack(w, r)
		if err != nil {
			t.Errorf("Hijack: %v", err)
			return
		}
		s.wg.Go(func() {
			write(d, r)
			d.Finish(s.back)
		})
	})}
	var serving sync.WaitGroup
	serving.Go(func() { srv.Serve(ln) })
	serving.Go(func() { srv.Serve(s.back) })
	t.Cleanup(func() {
		srv.Shutdown(context.Background())
		s.mu.Lock() // every handler's hijack is done (Shutdown waited for it) and its wg.Go with it
		s.mu.Unlock()
		s.wg.Wait()
		serving.Wait()
	})
	return s
}

// countingClient dials at most one connection and counts its dials.
func countingClient(t *testing.T, dials *int) *http.Client {
	tr := &http.Transport{MaxConnsPerHost: 1, DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		*dials++
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// A response flushed before its end is chunked; one written whole gets
// Content-Length; one ended with a last part (EndWith) is chunked,
// flushed or not. Either way the connection carries the next request.
func TestResponseForms(t *testing.T) {
	s := newServer(t, func(d *Response, r *http.Request) {
		if r.URL.Path == "/whole" {
			d.Header().Set("Content-Type", "text/plain")
			d.WriteHeader(http.StatusTeapot)
			io.WriteString(d, "short")
			return
		}
		if r.URL.Path == "/last" { // the headers, the body and its end in one write
			d.EndWith([]byte("all"))
			return
		}
		io.WriteString(d, "one,")
		if err := http.NewResponseController(d).Flush(); err != nil {
			t.Error(err)
		}
		if r.URL.Path == "/flushed-last" {
			d.EndWith([]byte("two"))
			return
		}
		io.WriteString(d, "two")
	})
	dials := 0
	c := countingClient(t, &dials)
	for range 2 {
		for _, tc := range []struct {
			path, body string
			status     int
			length     int64
		}{
			{"/chunked", "one,two", 200, -1}, {"/whole", "short", http.StatusTeapot, 5},
			{"/last", "all", 200, -1}, {"/flushed-last", "one,two", 200, -1},
		} {
			resp, err := c.Get(s.url + tc.path)
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || string(body) != tc.body || resp.StatusCode != tc.status || resp.ContentLength != tc.length {
				t.Errorf("%s: %d %q %v, length %d", tc.path, resp.StatusCode, body, err, resp.ContentLength)
			}
			if resp.Header.Get("X-Before") != "kept" || resp.Header.Get("Date") == "" {
				t.Errorf("%s: headers %v", tc.path, resp.Header)
			}
		}
	}
	if dials != 1 {
		t.Errorf("%d dials, want 1: the connection was not handed back", dials)
	}
}

// A request that says close gets "Connection: close", and its connection
// is closed after the response.
func TestResponseConnectionClose(t *testing.T) {
	s := newServer(t, func(d *Response, r *http.Request) { io.WriteString(d, "bye") })
	c, err := net.Dial("tcp", strings.TrimPrefix(s.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if string(body) != "bye" || !resp.Close {
		t.Errorf("%q, close %v", body, resp.Close)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("after the response: %v, want EOF", err)
	}
}

// Every request on a connection handed back sees the client's address
// (net/http reads it from the connection each time it is handed back).
func TestHandedBackRemoteAddr(t *testing.T) {
	s := newServer(t, func(d *Response, r *http.Request) { io.WriteString(d, r.RemoteAddr) })
	c, err := net.Dial("tcp", strings.TrimPrefix(s.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	for i := range 3 {
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		if string(body) != c.LocalAddr().String() {
			t.Errorf("request %d: remote address %q, want %q", i, body, c.LocalAddr())
		}
	}
}

// The reader notices a client that leaves; the response's writes then
// fail, and the connection is not handed back.
func TestWatchClientLeaves(t *testing.T) {
	gone := make(chan struct{})
	s := newServer(t, func(d *Response, r *http.Request) {
		d.Watch(func() { close(gone) })
		io.WriteString(d, "started")
		http.NewResponseController(d).Flush()
		<-gone
	})
	c, err := net.Dial("tcp", strings.TrimPrefix(s.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	if _, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil {
		t.Fatal(err)
	}
	c.Close()
	<-gone
}

// Closing the Listener (the server's Shutdown) closes the connections
// waiting there for their next request.
func TestListenerCloseEndsIdle(t *testing.T) {
	done := make(chan struct{})
	s := newServer(t, func(d *Response, r *http.Request) {
		io.WriteString(d, "ok")
		close(done)
	})
	c, err := net.Dial("tcp", strings.TrimPrefix(s.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.ReadAll(resp.Body)
	<-done
	s.wg.Wait() // handed back: waiting for the next request
	s.back.Close()
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Errorf("idle connection after Close: %v, want EOF", err)
	}
}

// Only plaintext HTTP/1.1 requests are taken.
func TestHijackRefusesOthers(t *testing.T) {
	for _, proto := range [][2]int{{1, 0}, {2, 0}} {
		r, _ := http.NewRequest(http.MethodGet, "/", nil)
		r.ProtoMajor, r.ProtoMinor = proto[0], proto[1]
		if _, err := Hijack(nil, r); !errors.Is(err, ErrNotHTTP11) {
			t.Errorf("HTTP/%d.%d: %v", proto[0], proto[1], err)
		}
	}
}

// Requests pipelined behind detached responses, more of them than
// net/http's read buffer holds, are each answered once, in order: the
// bytes of later requests read with one (net/http's buffer, the reader's
// byte) come back in front of the connection in the order they came.
func TestPipelinedBeyondReadBuffer(t *testing.T) {
	s := newServer(t, func(d *Response, r *http.Request) {
		d.Watch(func() {})
		io.WriteString(d, "a:"+r.URL.Path)
		http.NewResponseController(d).Flush()
		io.WriteString(d, ";b")
	})
	for _, pad := range []int{0, 1000, 3900, 4090, 5000} {
		c, err := net.Dial("tcp", strings.TrimPrefix(s.url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		var all strings.Builder
		const n = 12
		for i := range n {
			fmt.Fprintf(&all, "GET /%d HTTP/1.1\r\nHost: x\r\nX-Pad: %s\r\n\r\n", i, strings.Repeat("p", pad))
		}
		var wrote sync.WaitGroup
		wrote.Go(func() { io.WriteString(c, all.String()) })
		br := bufio.NewReader(c)
		for i := range n {
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("pad %d, response %d: %v", pad, i, err)
			}
			b, _ := io.ReadAll(resp.Body)
			if want := fmt.Sprintf("a:/%d;b", i); string(b) != want {
				t.Fatalf("pad %d, response %d: %d %q, want %q", pad, i, resp.StatusCode, b, want)
			}
		}
		wrote.Wait()
		c.Close()
	}
}

// WriteNow never waits for the client: with the client not reading, it
// writes what the socket takes until it takes nothing, keeps the rest,
// and the next Write sends that first once the client reads. The client
// gets every byte, in order.
func TestWriteNowNeverWaits(t *testing.T) {
	stalled := make(chan struct{})
	var sent strings.Builder
	s := newServer(t, func(d *Response, r *http.Request) {
		d.conn.(*net.TCPConn).SetWriteBuffer(16 << 10)
		if err := d.FlushError(); err != nil {
			t.Error(err)
			return
		}
		for i := 0; ; i++ {
			p := fmt.Sprintf("%06d%s\n", i, strings.Repeat("x", 4<<10))
			sent.WriteString(p)
			done, err := d.WriteNow([]byte(p))
			if err != nil {
				t.Error(err)
				return
			}
			if !done { // the socket is full: the rest stays behind
				break
			}
		}
		if done, _ := d.WriteNow([]byte("behind\n")); done { // nothing may overtake the rest
			t.Error("WriteNow wrote past what it kept")
		}
		sent.WriteString("behind\nend\n")
		close(stalled)
		io.WriteString(d, "end\n") // waits: the rest, then this
	})
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if tc, ok := c.(*net.TCPConn); ok {
			tc.SetReadBuffer(16 << 10)
		}
		return c, err
	}}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Get(s.url + "/now")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	<-stalled
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != sent.String() {
		t.Fatalf("got %d bytes, want the %d sent, in order", len(got), sent.Len())
	}
}

// FinishNow never waits for the client: on a connection whose socket is
// full it keeps the response's end (here with a last part, EndWith's)
// and says so, and Finish, on a goroutine that may wait, sends it once
// the client reads. The client
// gets the whole response, and the connection carries the next request.
func TestFinishNowNeverWaits(t *testing.T) {
	stalled := make(chan struct{})
	back := make(chan *Listener, 1) // the server's, for the first request's handler
	var sent strings.Builder
	s := newServer(t, func(d *Response, r *http.Request) {
		d.Watch(func() {})
		if r.URL.Path == "/next" {
			io.WriteString(d, "next")
			return
		}
		d.conn.(*net.TCPConn).SetWriteBuffer(16 << 10)
		if err := d.FlushError(); err != nil {
			t.Error(err)
			return
		}
		for i := 0; ; i++ { // until the socket takes nothing more
			p := fmt.Sprintf("%06d%s\n", i, strings.Repeat("x", 4<<10))
			sent.WriteString(p)
			if done, err := d.WriteNow([]byte(p)); err != nil || !done {
				break
			}
		}
		d.EndWith([]byte("last\n")) // kept, behind the rest, for the end
		sent.WriteString("last\n")
		if d.FinishNow(<-back) {
			t.Error("FinishNow finished on a full socket")
		}
		close(stalled) // newServer's Finish sends the rest
	})
	dials := 0
	tr := &http.Transport{MaxConnsPerHost: 1, DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials++
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if tc, ok := c.(*net.TCPConn); ok {
			tc.SetReadBuffer(16 << 10)
		}
		return c, err
	}}
	defer tr.CloseIdleConnections()
	back <- s.back
	c := &http.Client{Transport: tr}
	resp, err := c.Get(s.url + "/now")
	if err != nil {
		t.Fatal(err)
	}
	<-stalled
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || string(got) != sent.String() {
		t.Fatalf("got %d bytes (%v), want the %d sent, in order", len(got), err, sent.Len())
	}
	resp, err = c.Get(s.url + "/next")
	if err != nil {
		t.Fatal(err)
	}
	got, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(got) != "next" || dials != 1 {
		t.Errorf("next: %q, %d dials", got, dials)
	}
}

// A connection handed back after a detached response keeps its socket's
// CloseWrite and SyscallConn: the next request's handler takes it from
// net/http, as a WebSocket upgrade does, and gets a write that does not
// wait (rawsock.Writer) and a half-close the client sees as the end.
func TestHandedBackKeepsSocket(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	back := NewListener(ln.Addr())
	inFront := make(chan string, 1) // the bytes in front of the connection handed back
	seenEOF := make(chan struct{})
	sawEOF := sync.OnceFunc(func() { close(seenEOF) })
	var handlers sync.WaitGroup
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/detached" {
			d, err := Hijack(w, r)
			if err != nil {
				t.Errorf("Hijack: %v", err)
				return
			}
			io.WriteString(d, "detached")
			d.Finish(back)
			return
		}
		handlers.Add(1) // before Shutdown can return: the connection is active
		defer handlers.Done()
		c, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("Hijack: %v", err)
			return
		}
		defer c.Close()
		if _, ok := c.(*keptConn); !ok {
			t.Errorf("the second request came on a %T, not a connection handed back", c)
		} else if kept, want := <-inFront, "GET /upgrade HTTP/1.1\r\nHost: x\r\n\r\n"; kept != want {
			// One write of the client's, read whole by the reader: net/http
			// parsed it with no read of its own.
			t.Errorf("handed back with %q in front, want the whole request %q", kept, want)
		}
		if kc, ok := c.(*keptConn); ok && kc.kept != nil {
			t.Errorf("the connection still holds %d kept bytes net/http has read", len(kc.kept))
		}
		if w := rawsock.Wrap(c); w != c {
			t.Errorf("rawsock wrapped the handed-back connection (%T): its raw reads would skip the kept bytes", w)
		}
		rw := rawsock.NewWriter(c)
		if rw == nil {
			t.Error("no raw writer on the handed-back connection")
			return
		}
		if n, err := rw.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nraw")); n != 41 || err != nil {
			t.Errorf("raw write: %d %v", n, err)
			return
		}
		cw, ok := c.(interface{ CloseWrite() error })
		if !ok {
			t.Error("no CloseWrite on the handed-back connection")
			return
		}
		if err := cw.CloseWrite(); err != nil {
			t.Errorf("CloseWrite: %v", err)
			return
		}
		<-seenEOF // the client saw the end before the connection closed
	})}
	var serving sync.WaitGroup
	serving.Go(func() { srv.Serve(rawsock.Listener{Listener: ln}) })
	serving.Go(func() { srv.Serve(frontListener{back, inFront}) })
	t.Cleanup(func() {
		srv.Shutdown(context.Background())
		handlers.Wait()
		serving.Wait()
	})
	t.Cleanup(sawEOF) // first: a test failed early leaves no handler waiting

	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	get := func(path string) string {
		t.Helper()
		if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return string(body)
	}
	if body := get("/detached"); body != "detached" {
		t.Fatalf("first response %q", body)
	}
	if body := get("/upgrade"); body != "raw" {
		t.Fatalf("second response %q", body)
	}
	if n, err := br.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("after the half-close: %d %v, want EOF", n, err)
	}
	sawEOF()
}

// frontListener is l, telling in front what bytes a connection handed
// back brings in front of its socket's (before net/http reads them).
type frontListener struct {
	net.Listener
	front chan<- string
}

func (l frontListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if kc, ok := c.(*keptConn); ok {
		l.front <- string(kc.kept)
	}
	return c, err
}
