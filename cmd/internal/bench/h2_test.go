package bench

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// TestH2Pool: over a real h2c server, 5 streams held open at 2 per
// connection take 3 HTTP/2 connections; a stream that ends frees its slot
// for the next request, which opens no connection.
func TestH2Pool(t *testing.T) {
	var mu sync.Mutex
	protos, remotes := map[string]int{}, map[string]int{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		protos[r.Proto]++
		remotes[r.RemoteAddr]++
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"OUT\":1}\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done() // held until the client leaves
	}))
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	defer srv.Close()

	p := newH2Pool(srv.Listener.Addr().String(), 2)
	defer p.CloseIdleConnections()
	open := func() *http.Response {
		t.Helper()
		req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, srv.URL+"/x", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := p.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		if line, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil || !strings.HasPrefix(line, "data:") {
			t.Fatalf("first line %q, %v", line, err)
		}
		return resp
	}
	var held []*http.Response
	for range 5 {
		held = append(held, open())
	}
	if n := p.connections(); n != 3 {
		t.Errorf("5 streams at 2 per connection opened %d connections, want 3", n)
	}
	held[0].Body.Close()
	held[0] = open()
	if n := p.connections(); n != 3 {
		t.Errorf("a request after one ended opened a connection: %d, want 3", n)
	}
	for _, r := range held {
		r.Body.Close()
	}
	mu.Lock()
	defer mu.Unlock()
	if len(protos) != 1 || protos["HTTP/2.0"] != 6 {
		t.Errorf("protocols %v, want 6 requests over HTTP/2.0", protos)
	}
	if len(remotes) != 3 {
		t.Errorf("requests came from %d connections (%v), want 3", len(remotes), remotes)
	}
}
