package tensor

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	pb "github.com/streamgate/streamgate/proto/inferencepb"
)

func le32(n uint32) []byte { return binary.LittleEndian.AppendUint32(nil, n) }

var splitCases = []struct {
	name string
	raw  []byte
	n    int64
	want []string
	ok   bool
}{
	{"empty string", le32(0), 1, []string{""}, true},
	{"two", append(append(le32(2), "hi"...), append(le32(1), "x"...)...), 2, []string{"hi", "x"}, true},
	{"none", nil, 0, nil, true},
	{"short prefix", []byte{1, 0}, 1, nil, false},
	{"length past end", append(le32(9), "abc"...), 1, nil, false},
	{"too many", append(le32(0), le32(0)...), 1, nil, false},
	{"too few", le32(0), 2, nil, false},
	{"trailing bytes", append(le32(0), 7), 1, nil, false},
	{"huge length", append(le32(0xffffffff), "a"...), 1, nil, false},
}

func TestSplitBytes(t *testing.T) {
	for _, c := range splitCases {
		got, err := SplitBytes(c.raw, c.n)
		if c.ok != (err == nil) {
			t.Fatalf("%s: err %v, want ok=%v", c.name, err, c.ok)
		}
		if err != nil {
			if !errors.Is(err, ErrBytesLayout) {
				t.Fatalf("%s: %v does not wrap ErrBytesLayout", c.name, err)
			}
			continue
		}
		if len(got) != len(c.want) {
			t.Fatalf("%s: got %q", c.name, got)
		}
		for i := range got {
			if string(got[i]) != c.want[i] {
				t.Fatalf("%s: got %q", c.name, got)
			}
		}
		if !bytes.Equal(JoinBytes(got), c.raw) && c.raw != nil {
			t.Fatalf("%s: JoinBytes does not round-trip", c.name)
		}
	}
}

func FuzzSplitBytes(f *testing.F) {
	for _, c := range splitCases {
		f.Add(c.raw, c.n)
	}
	f.Fuzz(func(t *testing.T, raw []byte, n int64) {
		got, err := SplitBytes(raw, n)
		if err != nil {
			return
		}
		if int64(len(got)) != n || !bytes.Equal(JoinBytes(got), raw) {
			t.Fatalf("accepted %x as %d elements %q", raw, n, got)
		}
	})
}

// FuzzFromRequest feeds arbitrary shapes, datatypes and data: decoding must
// either fail with an error or return tensors whose data matches the shape.
func FuzzFromRequest(f *testing.F) {
	f.Add("INT32", int64(2), int64(1), []byte{1, 0, 0, 0, 2, 0, 0, 0}, false)
	f.Add("BYTES", int64(1), int64(1), append(le32(1), 'a'), false)
	f.Add("BYTES", int64(2), int64(1), append(le32(1), 'a'), false)
	f.Add("FP16", int64(1), int64(1), []byte{0, 0}, true)
	f.Add("INT32", int64(-1), int64(3), []byte{}, false)
	f.Add("UINT8", int64(3), int64(0), []byte{}, true)
	f.Add("BOOL", int64(1<<40), int64(1<<40), []byte{1}, false)
	f.Fuzz(func(t *testing.T, dt string, d0, d1 int64, raw []byte, typed bool) {
		in := &pb.ModelInferRequest_InferInputTensor{Name: "X", Datatype: dt, Shape: []int64{d0, d1}}
		req := &pb.ModelInferRequest{ModelName: "m", Inputs: []*pb.ModelInferRequest_InferInputTensor{in}}
		if typed {
			in.Contents = &pb.InferTensorContents{BytesContents: [][]byte{raw}, IntContents: []int32{int32(len(raw))}, BoolContents: []bool{len(raw) > 0}}
		} else {
			req.RawInputContents = [][]byte{raw}
		}
		ts, err := FromRequest(req)
		if err != nil {
			return
		}
		if len(ts) != 1 || ts[0].Validate() != nil {
			t.Fatalf("accepted invalid tensor %+v", ts)
		}
	})
}

func TestFromRequestTyped(t *testing.T) {
	req := &pb.ModelInferRequest{ModelName: "m", Inputs: []*pb.ModelInferRequest_InferInputTensor{
		{Name: "a", Datatype: "INT16", Shape: []int64{2}, Contents: &pb.InferTensorContents{IntContents: []int32{-1, 2}}},
		{Name: "b", Datatype: "BYTES", Shape: []int64{2}, Contents: &pb.InferTensorContents{BytesContents: [][]byte{[]byte("x"), nil}}},
		{Name: "c", Datatype: "FP16", Shape: []int64{1}, Contents: &pb.InferTensorContents{}},
	}}
	_, err := FromRequest(req)
	if err == nil || err.Error() != "FP16 tensors must use raw_input_contents for input 'c' for model 'm'" {
		t.Fatalf("FP16 typed: %v", err)
	}
	req.Inputs = req.Inputs[:2]
	ts, err := FromRequest(req)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ts[0].Raw, []byte{0xff, 0xff, 2, 0}) {
		t.Fatalf("INT16 raw %x", ts[0].Raw)
	}
	s, _ := ts[1].Strings()
	if len(s) != 2 || string(s[0]) != "x" || len(s[1]) != 0 {
		t.Fatalf("BYTES %q", s)
	}
	req.Inputs[0].Contents.IntContents = []int32{1}
	if _, err := FromRequest(req); err == nil {
		t.Fatal("accepted typed contents with the wrong element count")
	}
}
