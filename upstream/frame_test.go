package upstream

import (
	"math"
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	pb "github.com/streamgate/streamgate/proto/inferencepb"
)

func boolParam(v bool) *pb.InferParameter {
	return &pb.InferParameter{ParameterChoice: &pb.InferParameter_BoolParam{BoolParam: v}}
}

// frameCases are ModelStreamInferResponses covering every field the
// decoder reads.
func frameCases() map[string]*pb.ModelStreamInferResponse {
	repeat := intResp(7)
	repeat.Id = "sg-1-a"
	repeat.Parameters = map[string]*pb.InferParameter{"triton_final_response": boolParam(false)}
	text := textResp("héllo", true)
	text.Id = "sg-1-b"
	typed := &pb.ModelInferResponse{
		ModelName: "typed", ModelVersion: "3", Id: "x",
		Parameters: map[string]*pb.InferParameter{
			"b": boolParam(true),
			"i": {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: -5}},
			"s": {ParameterChoice: &pb.InferParameter_StringParam{StringParam: "stop"}},
			"d": {ParameterChoice: &pb.InferParameter_DoubleParam{DoubleParam: math.Pi}},
			"u": {ParameterChoice: &pb.InferParameter_Uint64Param{Uint64Param: math.MaxUint64}},
			"e": {},
		},
		Outputs: []*pb.ModelInferResponse_InferOutputTensor{
			{Name: "B", Datatype: "BOOL", Shape: []int64{2}, Contents: &pb.InferTensorContents{BoolContents: []bool{true, false}}},
			{Name: "I", Datatype: "INT32", Shape: []int64{1, 3}, Contents: &pb.InferTensorContents{IntContents: []int32{-1, 0, 1 << 30}},
				Parameters: map[string]*pb.InferParameter{"p": boolParam(true)}},
			{Name: "L", Datatype: "INT64", Shape: []int64{1}, Contents: &pb.InferTensorContents{Int64Contents: []int64{math.MinInt64}}},
			{Name: "U", Datatype: "UINT32", Shape: []int64{1}, Contents: &pb.InferTensorContents{UintContents: []uint32{math.MaxUint32}}},
			{Name: "V", Datatype: "UINT64", Shape: []int64{1}, Contents: &pb.InferTensorContents{Uint64Contents: []uint64{1 << 63}}},
			{Name: "F", Datatype: "FP32", Shape: []int64{2}, Contents: &pb.InferTensorContents{Fp32Contents: []float32{1.5, float32(math.Inf(-1))}}},
			{Name: "D", Datatype: "FP64", Shape: []int64{1}, Contents: &pb.InferTensorContents{Fp64Contents: []float64{-0.25}}},
			{Name: "S", Datatype: "BYTES", Shape: []int64{2}, Contents: &pb.InferTensorContents{BytesContents: [][]byte{[]byte("a"), {}}}},
			{Name: "E", Datatype: "BYTES", Shape: []int64{0}, Contents: &pb.InferTensorContents{}},
		},
	}
	return map[string]*pb.ModelStreamInferResponse{
		"repeat":  {InferResponse: repeat},
		"text":    {InferResponse: text},
		"typed":   {InferResponse: typed},
		"error":   {ErrorMessage: "in-band failure", InferResponse: &pb.ModelInferResponse{Id: "sg-1-c", Parameters: map[string]*pb.InferParameter{"streamgate_error_class": {ParameterChoice: &pb.InferParameter_StringParam{StringParam: "NOT_FOUND"}}}}},
		"empty":   {},
		"no resp": {ErrorMessage: "x"},
		"final":   {InferResponse: &pb.ModelInferResponse{Id: "sg-1-d", Parameters: map[string]*pb.InferParameter{"triton_final_response": boolParam(true)}}},
	}
}

// dropUnknown clears the unknown fields of m and every message in it: the
// frame decoder skips them.
func dropUnknown(m protoreflect.Message) {
	m.SetUnknown(nil)
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList() && fd.Message() != nil:
			l := v.List()
			for i := range l.Len() {
				dropUnknown(l.Get(i).Message())
			}
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				dropUnknown(mv.Message())
				return true
			})
		case fd.Message() != nil && !fd.IsList() && !fd.IsMap():
			dropUnknown(v.Message())
		}
		return true
	})
}

// checkDecode decodes wire into f and compares it with proto.Unmarshal's
// reading. It reports false when proto.Unmarshal refuses wire.
func checkDecode(t *testing.T, f *frame, wire []byte) bool {
	t.Helper()
	want := &pb.ModelStreamInferResponse{}
	if proto.Unmarshal(wire, want) != nil {
		return false
	}
	dropUnknown(want.ProtoReflect())
	h, err := scanHeader(wire)
	if err != nil {
		t.Fatalf("scanHeader refused what proto.Unmarshal reads: %v\n% x", err, wire)
	}
	wr := want.GetInferResponse()
	if string(h.id) != wr.GetId() || string(h.errMsg) != want.GetErrorMessage() || h.final != isFinal(wr) || h.flagsOnly != flagsOnly(wr) {
		t.Fatalf("header id %q error %q final %v flagsOnly %v for\n%v", h.id, h.errMsg, h.final, h.flagsOnly, want)
	}
	if err := f.load(mem.BufferSlice{mem.SliceBuffer(wire)}); err != nil {
		t.Fatalf("decode refused what proto.Unmarshal reads: %v\n% x", err, wire)
	}
	if f.errMsg != want.GetErrorMessage() || f.hasResp != (want.InferResponse != nil) {
		t.Fatalf("error %q resp %v, want %q %v", f.errMsg, f.hasResp, want.GetErrorMessage(), want.InferResponse != nil)
	}
	if !f.hasResp {
		return true
	}
	if string(f.id) != wr.GetId() {
		t.Fatalf("id %q, want %q", f.id, wr.GetId())
	}
	wr.Id = ""
	if !proto.Equal(&f.resp, wr) {
		t.Fatalf("decoded\n%v\nwant\n%v", &f.resp, wr)
	}
	return true
}

// TestFrameDecode: the frame decoder reads every field as proto.Unmarshal
// does, including when a frame is reused for messages of other shapes.
func TestFrameDecode(t *testing.T) {
	cases := frameCases()
	f := &frame{}
	order := []string{"typed", "repeat", "text", "typed", "error", "empty", "final", "repeat", "no resp", "typed", "text"}
	for _, name := range order {
		wire, err := proto.Marshal(cases[name])
		if err != nil {
			t.Fatal(err)
		}
		if !checkDecode(t, f, wire) {
			t.Fatalf("%s: proto.Unmarshal refused its own output", name)
		}
	}
	// Unknown fields anywhere are skipped; an unpacked shape is read.
	wire, _ := proto.Marshal(cases["repeat"])
	wire = protowire.AppendTag(wire, 9, protowire.VarintType)
	wire = protowire.AppendVarint(wire, 5)
	checkDecode(t, f, wire)
	var out []byte
	out = protowire.AppendTag(out, 1, protowire.BytesType)
	out = protowire.AppendString(out, "OUT")
	out = protowire.AppendTag(out, 3, protowire.VarintType)
	out = protowire.AppendVarint(out, 4)
	out = protowire.AppendTag(out, 3, protowire.VarintType)
	out = protowire.AppendVarint(out, 2)
	out = protowire.AppendTag(out, 7, protowire.Fixed32Type)
	out = protowire.AppendFixed32(out, 1)
	var resp []byte
	resp = protowire.AppendTag(resp, 5, protowire.BytesType)
	resp = protowire.AppendBytes(resp, out)
	resp = protowire.AppendTag(resp, 1, protowire.VarintType) // wrong wire type: unknown
	resp = protowire.AppendVarint(resp, 1)
	var msg []byte
	msg = protowire.AppendTag(msg, 2, protowire.BytesType)
	msg = protowire.AppendBytes(msg, resp)
	if !checkDecode(t, f, msg) {
		t.Fatal("proto.Unmarshal refused the hand-built message")
	}
	// Truncated messages are errors, never panics.
	full, _ := proto.Marshal(cases["typed"])
	for i := 1; i < len(full); i++ {
		_ = f.load(mem.BufferSlice{mem.SliceBuffer(full[:i])})
	}
}

// TestFrameDecodeAllocs: once a frame has seen a message's shape, decoding
// the next one allocates nothing.
func TestFrameDecodeAllocs(t *testing.T) {
	for name, m := range frameCases() {
		if name == "error" || name == "no resp" { // error texts are copied
			continue
		}
		wire, _ := proto.Marshal(m)
		data := mem.BufferSlice{mem.SliceBuffer(wire)}
		f := &frame{}
		if err := f.load(data); err != nil {
			t.Fatal(err)
		}
		if n := testing.AllocsPerRun(100, func() { _ = f.load(data) }); n != 0 {
			t.Errorf("%s: %v allocations per decode", name, n)
		}
	}
}

// FuzzFrameDecode: whatever proto.Unmarshal reads, the frame decoder reads
// the same; nothing panics.
func FuzzFrameDecode(f *testing.F) {
	for _, m := range frameCases() {
		wire, _ := proto.Marshal(m)
		f.Add(wire)
	}
	fr := &frame{}
	f.Fuzz(func(t *testing.T, wire []byte) {
		if !checkDecode(t, fr, wire) {
			_ = fr.load(mem.BufferSlice{mem.SliceBuffer(wire)})
		}
	})
}

// BenchmarkDecode compares ways of decoding an engine response (a
// repeat_int32 one: two outputs, the final flag) on the client:
//
//   - proto: proto.Unmarshal into a new message, as grpc-go's codec does;
//   - proto-reuse: proto.Unmarshal into one reused message (it resets the
//     message first, so every field is allocated again);
//   - scan+frame: what upstream does, scanHeader on the stream's reader
//     and frame.decode on the call's consumer, into a reused frame.
func BenchmarkDecode(b *testing.B) {
	r := intResp(7)
	r.Id = "sg-0123456789ab-1f"
	r.ModelVersion = "1"
	r.Parameters = map[string]*pb.InferParameter{"triton_final_response": boolParam(false)}
	wireBytes, _ := proto.Marshal(&pb.ModelStreamInferResponse{InferResponse: r})
	b.Run("proto", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			m := &pb.ModelStreamInferResponse{}
			if err := proto.Unmarshal(wireBytes, m); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("proto-reuse", func(b *testing.B) {
		b.ReportAllocs()
		m := &pb.ModelStreamInferResponse{}
		for b.Loop() {
			if err := proto.Unmarshal(wireBytes, m); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("scan+frame", func(b *testing.B) {
		b.ReportAllocs()
		f := &frame{}
		for b.Loop() {
			if _, err := scanHeader(wireBytes); err != nil {
				b.Fatal(err)
			}
			f.buf = append(f.buf[:0], wireBytes...)
			if err := f.decode(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
