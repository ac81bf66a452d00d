package ws

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/coder/websocket"

	"github.com/streamgate/streamgate/upstream/budget"
)

// pipeWriter is an http.ResponseWriter whose Hijack hands over conn.
type pipeWriter struct {
	h    http.Header
	conn net.Conn
}

func (w *pipeWriter) Header() http.Header         { return w.h }
func (w *pipeWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *pipeWriter) WriteHeader(int)             {}
func (w *pipeWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return w.conn, bufio.NewReadWriter(bufio.NewReader(w.conn), bufio.NewWriter(w.conn)), nil
}

// discardConn is a socket accepted over a loopback TCP connection whose
// client end reads and drops everything.
func discardConn(t *testing.T) *Conn {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	client, err := net.Dial("tcp", lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err := lis.Accept()
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() { io.Copy(io.Discard, client) })
	t.Cleanup(func() {
		server.Close()
		client.Close()
		wg.Wait()
	})
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	for k, v := range map[string]string{"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13",
		"Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Protocol": Subprotocol} {
		r.Header.Set(k, v)
	}
	c, err := Accept(&pipeWriter{h: http.Header{}, conn: server}, r, &websocket.AcceptOptions{Subprotocols: []string{Subprotocol}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestSendPathAllocatesNothing: queuing a data frame and writing the
// batch to the network allocates nothing once the buffers have grown.
func TestSendPathAllocatesNothing(t *testing.T) {
	s := NewSession(discardConn(t), nil, nil)
	ctx := context.WithoutCancel(t.Context())
	data := []byte(`{"model_name":"repeat_int32","model_version":"1","OUT":7,"IDX":3}`)
	var batch []byte
	var seq uint64
	send := func() {
		for range 3 {
			err := s.push(len(data)+64, func(b []byte) []byte { return AppendDataFrame(b, "a1", seq, data) })
			if err != nil {
				t.Fatal(err)
			}
			seq++
		}
		batch = s.q.take(batch, nil)
		if !s.writeBatch(ctx, batch) {
			t.Fatal("write failed")
		}
	}
	send()
	if n := testing.AllocsPerRun(1000, send); n != 0 {
		t.Fatalf("%v allocations per batch of 3 frames", n)
	}
}

// TestStalledSocketsStayWithinBudget: sockets whose clients read nothing
// while their requests produce without end are each closed with 1008 once
// their queue is over its bound, and together never borrow more than the
// shared budget, which gets everything back.
func TestStalledSocketsStayWithinBudget(t *testing.T) {
	mem := budget.New(3 << 20)
	payload := []byte(`"` + strings.Repeat("x", 16<<10) + `"`)
	h := func(ctx context.Context, req *Request, emit func([]byte) error) error {
		for {
			if err := emit(payload); err != nil {
				return err
			}
		}
	}
	srv := newServer(t, h, &Options{QueueBytes: 1 << 20, Memory: mem})
	const sockets = 8
	var wg sync.WaitGroup
	for range sockets {
		c := dial(t, srv.url)
		send(t, c, `{"type":"generate","id":"a","model":"m"}`)
		send(t, c, `{"type":"generate","id":"b","model":"m"}`)
		wg.Go(func() {
			// Read nothing until the server gives up, then see why.
			<-(<-srv.sessions).closed
			for {
				if _, _, err := c.Read(context.Background()); err != nil {
					if websocket.CloseStatus(err) != websocket.StatusPolicyViolation {
						t.Errorf("closed with %v, want 1008", err)
					}
					return
				}
			}
		})
	}
	wg.Wait()
	srv.wg.Wait() // every session has ended
	if mem.Peak() > mem.Limit() || mem.Used() != 0 {
		t.Fatalf("borrowed %d at the peak of %d, %d still", mem.Peak(), mem.Limit(), mem.Used())
	}
}
