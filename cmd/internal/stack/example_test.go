package stack_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"strings"

	"github.com/streamgate/streamgate/cmd/internal/stack"
	"github.com/streamgate/streamgate/engine"
	"github.com/streamgate/streamgate/engine/builtin"
	"github.com/streamgate/streamgate/gateway"
)

// Start an engine with the built-in models and a gateway in front of it
// (over loopback gRPC), both on free ports, and ask the gateway for one
// generation.
func ExampleStart() {
	st, err := stack.Start(stack.Config{
		Engine:  &engine.Options{Repository: builtin.FS, Backends: builtin.Backends()},
		Gateway: &gateway.Options{},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer st.Stop(context.Background())

	resp, err := http.Post(st.URL()+"/v2/models/echo/generate", "application/json",
		strings.NewReader(`{"text_input":"hello"}`))
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, string(body))
	// Output: 200 {"model_name":"echo","model_version":"1","text_output":"hello","finish_reason":"stop","num_input_tokens":1,"num_output_tokens":1}
}
