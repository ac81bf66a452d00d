package gateway_test

import (
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/streamgate/streamgate/engine"
	"github.com/streamgate/streamgate/engine/builtin"
	"github.com/streamgate/streamgate/gateway"
	"github.com/streamgate/streamgate/upstream"
)

// A gateway in front of an engine: the engine serves gRPC on a free
// loopback port, an upstream client pools streams to it, and the
// gateway's handler serves the HTTP routes. The echo model repeats the
// prompt.
func ExampleNew() {
	eng, err := engine.New(engine.Options{Repository: builtin.FS, Backends: builtin.Backends()})
	if err != nil {
		log.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go eng.Serve(lis)
	defer eng.Stop()

	up, err := upstream.New([]string{lis.Addr().String()}, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer up.Close()
	srv := httptest.NewServer(gateway.New(up, &gateway.Options{}).Handler())
	defer srv.Close()

	resp, err := http.Post(srv.URL+"/v1/completions", "application/json",
		strings.NewReader(`{"model":"echo","prompt":"hello","max_tokens":8}`))
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, strings.Contains(string(body), `"text":"hello"`))
	// Output: 200 true
}
