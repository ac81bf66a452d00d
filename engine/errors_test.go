package engine_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/streamgate/streamgate/engine"
	"github.com/streamgate/streamgate/proto/errclass"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
	"github.com/streamgate/streamgate/proto/tensor"
)

func param(v any) *pb.InferParameter {
	switch v := v.(type) {
	case bool:
		return boolParam(v)
	case int64:
		return &pb.InferParameter{ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: v}}
	case uint64:
		return &pb.InferParameter{ParameterChoice: &pb.InferParameter_Uint64Param{Uint64Param: v}}
	case string:
		return &pb.InferParameter{ParameterChoice: &pb.InferParameter_StringParam{StringParam: v}}
	}
	panic(v)
}

// TestInbandErrors checks that every request rejected before or by the
// model gets one in-band error with Triton's text, and that the stream
// keeps serving the request sent after it.
func TestInbandErrors(t *testing.T) {
	h := start(t, engine.Options{})
	withParam := func(k string, v any) *pb.ModelInferRequest {
		r := squareReq("e", 1, false)
		r.Parameters = map[string]*pb.InferParameter{k: param(v)}
		return r
	}
	typed := squareReq("e", 1, false)
	typed.Inputs[0].Contents = &pb.InferTensorContents{IntContents: []int32{1}}
	noData := squareReq("e", 1, false)
	noData.RawInputContents = nil
	fp := squareReq("e", 1, false)
	fp.Inputs[0].Datatype = "FP32"
	shape := squareReq("e", 1, false)
	shape.Inputs[0].Shape = []int64{2}
	size := squareReq("e", 1, false)
	size.RawInputContents[0] = []byte{1, 2}
	missing := repeatReq("e", 1, 0, 0, false)
	missing.Inputs, missing.RawInputContents = missing.Inputs[:1], missing.RawInputContents[:1]
	badOut := squareReq("e", 1, false)
	badOut.Outputs = []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "NOPE"}}
	waitSize := build("repeat_int32", "e", false,
		tensor.NewInt32("IN", []int64{1}, []int32{1}),
		tensor.NewUint32("DELAY", []int64{1}, []uint32{1}),
		tensor.NewUint32("WAIT", []int64{1}, []uint32{0}))
	waitSize.Inputs[2].Shape = []int64{-1}

	cases := []struct {
		name  string
		req   *pb.ModelInferRequest
		want  string
		final bool // error from the model (final flag) vs rejected before it
	}{
		{"unknown model", &pb.ModelInferRequest{ModelName: "nope", Id: "e"}, "Request for unknown model: 'nope' is not found", false},
		{"unknown version", func() *pb.ModelInferRequest { r := squareReq("e", 1, false); r.ModelVersion = "7"; return r }(), "Request for unknown model: 'square_int32' version 7 is not found", false},
		{"reserved key", withParam("triton_foo", true), "parameter keys starting with 'triton_' are reserved for Triton usage. Only the following keys starting with 'triton_' are allowed: triton_enable_empty_final_response", false},
		{"empty final type", withParam("triton_enable_empty_final_response", int64(1)), "invalid value type for 'triton_enable_empty_final_response' parameter, expected bool_param.", false},
		{"uint64 param", withParam("mine", uint64(3)), "invalid value type for 'mine' parameter, expected int64_param, bool_param, or string_param.", false},
		{"sequence_id type", withParam("sequence_id", true), "invalid value type for 'sequence_id' parameter, expected int64_param or string_param.", false},
		{"priority", withParam("priority", int64(-1)), "invalid value for 'priority', expected value >= 0.", false},
		{"raw and typed", typed, "contents field must not be specified when using raw_input_contents for 'IN' for model 'square_int32'", false},
		{"no data", noData, "unable to find data for input tensor 'IN' for model 'square_int32' in request.", false},
		{"datatype", fp, "inference input 'IN' data-type is 'FP32', but model 'square_int32' expects 'INT32'", false},
		{"shape", shape, "unexpected shape for input 'IN' for model 'square_int32'. Expected [1], got [2]", false},
		{"byte size", size, "unexpected total byte size 2, expecting 4 for input 'IN' for model 'square_int32'", false},
		{"input count", missing, "expected 3 inputs but got 1 inputs for model 'repeat_int32'", false},
		{"requested output", badOut, "unexpected inference output 'NOPE' for model 'square_int32'", false},
		{"wait size", waitSize, "unexpected shape for input 'WAIT' for model 'repeat_int32'. Expected [1], got [-1]", false},
		{"negative square", squareReq("e", -1, false), "IN must be non-negative, got -1", true},
	}
	// Every in-band error carries its class (streamgate_error_code).
	class := map[string]string{"unknown model": "NOT_FOUND", "unknown version": "NOT_FOUND"}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, byID := runStream(t, h, c.req, squareReq("after", 2, true))
			got := byID["e"]
			if len(got) != 1 || got[0].GetErrorMessage() != c.want {
				t.Fatalf("got %v, want one error %q", got, c.want)
			}
			wantClass := class[c.name]
			if wantClass == "" {
				wantClass = "INVALID_ARGUMENT"
			}
			if code := got[0].GetInferResponse().GetParameters()[errclass.Param].GetStringParam(); code != wantClass {
				t.Fatalf("%s = %q, want %q", errclass.Param, code, wantClass)
			}
			_, hasFinal := got[0].GetInferResponse().GetParameters()["triton_final_response"]
			if hasFinal != c.final || (c.final && !isFinal(got[0])) {
				t.Fatalf("final flag present=%v, want %v", hasFinal, c.final)
			}
			if n := len(byID["after"]); n != 3 {
				t.Fatalf("stream unusable after the error: %d responses for the next request", n)
			}
		})
	}
}

func TestTypedContentsAndBytes(t *testing.T) {
	h := start(t, engine.Options{})
	typed := &pb.ModelInferRequest{ModelName: "square_int32", Id: "t", Inputs: []*pb.ModelInferRequest_InferInputTensor{
		{Name: "IN", Datatype: "INT32", Shape: []int64{1}, Contents: &pb.InferTensorContents{IntContents: []int32{2}}}}}
	echoReq := build("echo", "w", false, tensor.NewString("text_input", "hello streaming world"), tensor.NewBool("stream", []int64{1}, []bool{true}))
	_, byID := runStream(t, h, typed, echoReq)
	if len(byID["t"]) != 2 || int32Out(t, byID["t"][0].GetInferResponse(), "OUT") != 2 {
		t.Fatalf("typed contents: %v", byID["t"])
	}
	var words []string
	for _, r := range byID["w"] {
		s, err := output(t, r.GetInferResponse(), "text_output").Strings()
		if err != nil {
			t.Fatal(err)
		}
		words = append(words, string(s[0]))
	}
	if len(words) != 4 || words[0] != "hello" || words[1] != " streaming" || words[2] != " world" || words[3] != "" {
		t.Fatalf("echo pieces: %q", words)
	}
	last := byID["w"][3]
	if !isFinal(last) || uint32Out(t, last.GetInferResponse(), "num_output_tokens") != 3 {
		t.Fatalf("echo final: %v", last)
	}
	if fr, _ := output(t, last.GetInferResponse(), "finish_reason").Strings(); string(fr[0]) != "stop" {
		t.Fatalf("finish_reason %q", fr)
	}
}

func TestMetadataAndConfig(t *testing.T) {
	h := start(t, engine.Options{})
	ctx := context.Background()
	md, err := h.client.ServerMetadata(ctx, &pb.ServerMetadataRequest{})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range md.GetExtensions() {
		found = found || e == "streamgate_cancel"
	}
	if !found || md.GetName() == "" || md.GetVersion() == "" {
		t.Fatalf("server metadata %v", md)
	}
	mm, err := h.client.ModelMetadata(ctx, &pb.ModelMetadataRequest{Name: "repeat_int32"})
	if err != nil {
		t.Fatal(err)
	}
	if mm.GetPlatform() != "repeat" || len(mm.GetInputs()) != 3 || mm.GetInputs()[1].GetDatatype() != "UINT32" || mm.GetVersions()[0] != "1" {
		t.Fatalf("model metadata %v", mm)
	}
	em, _ := h.client.ModelMetadata(ctx, &pb.ModelMetadataRequest{Name: "echo"})
	if em.GetInputs()[0].GetDatatype() != "BYTES" {
		t.Fatalf("TYPE_STRING must map to BYTES: %v", em)
	}
	cfg, err := h.client.ModelConfig(ctx, &pb.ModelConfigRequest{Name: "square_int32"})
	if err != nil || !cfg.GetConfig().GetModelTransactionPolicy().GetDecoupled() {
		t.Fatalf("model config %v %v", cfg, err)
	}
	if _, err := h.client.ModelMetadata(ctx, &pb.ModelMetadataRequest{Name: "nope"}); status.Code(err) != codes.NotFound {
		t.Fatalf("unknown model metadata: %v", err)
	}
	ready, err := h.client.ModelReady(ctx, &pb.ModelReadyRequest{Name: "nope"})
	if err != nil || ready.GetReady() {
		t.Fatalf("unknown model ready: %v %v", ready, err)
	}
	idx, err := h.client.RepositoryIndex(ctx, &pb.RepositoryIndexRequest{})
	if err != nil || len(idx.GetModels()) < 4 {
		t.Fatalf("repository index %v %v", idx, err)
	}
	if _, err := h.client.SystemSharedMemoryStatus(ctx, &pb.SystemSharedMemoryStatusRequest{}); status.Code(err) != codes.Unimplemented {
		t.Fatalf("unserved RPC: %v", err)
	}
}

// TestGRPCErrorMode: with metadata triton_grpc_error=true the first error
// ends the whole RPC with its gRPC status, cancelling the other requests.
func TestGRPCErrorMode(t *testing.T) {
	h := start(t, engine.Options{})
	for _, c := range []struct {
		name string
		bad  *pb.ModelInferRequest
		code codes.Code
		msg  string
	}{
		{"rejected", &pb.ModelInferRequest{ModelName: "nope", Id: "bad"}, codes.NotFound, "Request for unknown model: 'nope' is not found"},
		{"model error", build("repeat_int32", "bad", false,
			tensor.NewInt32("IN", []int64{1}, []int32{1}),
			tensor.NewUint32("DELAY", []int64{2}, []uint32{1, 2}),
			tensor.NewUint32("WAIT", []int64{1}, []uint32{0})), codes.InvalidArgument, "expected IN and DELAY shape to match, got [1] and [2]"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "triton_grpc_error", "true"), 20*time.Second)
			defer cancel()
			s, err := h.client.ModelStreamInfer(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Send(repeatReq("long", 100, 1000, 0, true)); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "long request running", func() bool { return h.srv.InFlight() == 1 })
			if err := s.Send(c.bad); err != nil {
				t.Fatal(err)
			}
			for {
				r, err := s.Recv()
				if err == nil {
					if r.GetErrorMessage() != "" {
						t.Fatalf("in-band error in triton_grpc_error mode: %v", r)
					}
					continue
				}
				st := status.Convert(err)
				if st.Code() != c.code || st.Message() != c.msg {
					t.Fatalf("RPC ended with %v, want %v %q", err, c.code, c.msg)
				}
				break
			}
			waitFor(t, "other request cancelled", func() bool { return h.srv.InFlight() == 0 })
		})
	}
}

func TestUnaryErrorCodes(t *testing.T) {
	h := start(t, engine.Options{})
	ctx := context.Background()
	_, err := h.client.ModelInfer(ctx, &pb.ModelInferRequest{ModelName: "nope"})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("unknown model: %v", err)
	}
	bad := build("identity_int32", "x", false, tensor.NewInt32("INPUT0", []int64{1}, []int32{1}))
	bad.Inputs[0].Datatype = "FP32"
	if _, err := h.client.ModelInfer(ctx, bad); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("wrong datatype: %v", err)
	}
	bad = build("identity_int32", "x", false, tensor.NewInt32("INPUT0", []int64{1}, []int32{1}))
	bad.Parameters = map[string]*pb.InferParameter{"triton_x": boolParam(true)}
	if _, err := h.client.ModelInfer(ctx, bad); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("reserved parameter: %v", err)
	}
}
