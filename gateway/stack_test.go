package gateway

import (
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/streamgate/streamgate/engine"
	"github.com/streamgate/streamgate/engine/builtin"
	"github.com/streamgate/streamgate/gateway/sse"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
	"github.com/streamgate/streamgate/upstream"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/encoding/prototext"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// stack is engine + upstream + gateway in one process over real loopback
// sockets: what `streamgate serve` runs.
type stack struct {
	eng *engine.Server
	up  *upstream.Client
	gw  *Server
	srv *httptest.Server
	url string

	handlers sync.WaitGroup // handler goroutines, WebSocket ones included
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func newStack(t testing.TB, opts *Options, configure ...func(*httptest.Server)) *stack {
	t.Helper()
	eng, err := engine.New(engine.Options{Repository: builtin.FS, Backends: builtin.Backends(), Logger: quietLogger(), Extra: []*pb.ModelConfig{echoSlowConfig(t)}})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		eng.Serve(lis)
	}()
	up, err := upstream.New([]string{lis.Addr().String()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := &stack{eng: eng, up: up}
	if opts == nil {
		opts = &Options{}
	}
	s.gw = New(up, opts)
	h := s.gw.Handler()
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.handlers.Add(1)
		defer s.handlers.Done()
		h.ServeHTTP(w, r)
	}))
	for _, c := range configure {
		c(s.srv)
	}
	if s.srv.EnableHTTP2 {
		s.srv.StartTLS()
	} else {
		s.srv.Start()
	}
	s.url = s.srv.URL
	t.Cleanup(func() {
		s.srv.CloseClientConnections()
		s.srv.Close()
		s.handlers.Wait()
		up.Close()
		eng.Stop()
		<-served
	})
	return s
}

// echoSlowConfig is the built-in echo model as "echo_slow", sleeping 20ms
// before each word: long prompts take long enough to be cancelled midway.
func echoSlowConfig(t testing.TB) *pb.ModelConfig {
	data, err := fs.ReadFile(builtin.FS, "echo/config.pbtxt")
	if err != nil {
		t.Fatal(err)
	}
	cfg := &pb.ModelConfig{}
	if err := prototext.Unmarshal(data, cfg); err != nil {
		t.Fatal(err)
	}
	cfg.Name = "echo_slow"
	cfg.Parameters = map[string]*pb.ModelParameter{"delay_ms": {StringValue: "20"}}
	return cfg
}

// words returns n words: "w0 w1 ...".
func words(n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString("w" + strconv.Itoa(i))
	}
	return b.String()
}

// post sends body to path and returns the response with its body read.
func (s *stack) post(t testing.TB, path, body string) (*http.Response, string) {
	t.Helper()
	resp, err := http.Post(s.url+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	loadSpec(t).checkResponse(t, s.gw.Handler().(chi.Routes), http.MethodPost, path, resp, b)
	return resp, string(b)
}

func (s *stack) get(t testing.TB, path string) (*http.Response, string) {
	t.Helper()
	resp, err := http.Get(s.url + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	loadSpec(t).checkResponse(t, s.gw.Handler().(chi.Routes), http.MethodGet, path, resp, b)
	return resp, string(b)
}

// events parses an SSE body into its data payloads, failing on anything
// that is not an event or a keepalive comment.
func events(t testing.TB, body string) []string {
	t.Helper()
	r := sse.NewReader(strings.NewReader(body))
	var out []string
	for {
		ev, err := r.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("bad SSE body %q: %v", body, err)
		}
		if !ev.IsComment {
			out = append(out, ev.Data)
		}
	}
}

// waitFor polls cond; it fails the test if cond never holds. The bound is
// generous and only guards against hangs, it asserts no timing.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// noKeepAlive makes streams byte-exact: no ": keepalive" comments.
func noKeepAlive() *Options {
	return &Options{SSE: &sse.Options{KeepAlive: -1}}
}

func fixedNow() time.Time { return time.Unix(1700000000, 0) }
