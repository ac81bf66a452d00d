package tritonhttp

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"unsafe"

	"github.com/streamgate/streamgate/gateway/internal/jsonobj"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
	"github.com/streamgate/streamgate/proto/tensor"
)

// FuzzParse feeds the binary extension's parser any body and header
// length: it answers an *Error or a *SyntaxError, never panics, takes
// exactly the bytes after the header for its binary inputs, and a parsed
// request's tensors, echoed back by an identity model, make an answer
// whose JSON part is JSON and whose binary part is their data in order.
func FuzzParse(f *testing.F) {
	seeds := []struct {
		header string
		blob   []byte
	}{
		{`{"id":"1","inputs":[{"name":"IN","shape":[2],"datatype":"INT32","parameters":{"binary_data_size":8}}],"parameters":{"binary_data_output":true}}`, le32(1, 2)},
		{`{"inputs":[{"name":"S","shape":[2],"datatype":"BYTES","parameters":{"binary_data_size":9}},{"name":"B","shape":[1],"datatype":"BOOL","data":[true]}],"outputs":[{"name":"S","parameters":{"binary_data":true}},{"name":"B"}]}`, append(append(le32(1), 'a'), le32(0)...)},
		{`{"inputs":[{"name":"X","shape":[2,2],"datatype":"FP32","data":[[1.5,2],[3,4e-7]]},{"name":"Y","shape":[1],"datatype":"FP16","parameters":{"binary_data_size":2}}]}`, le16(0x3c00)},
		{`{"inputs":[{"name":"X","shape":[1],"datatype":"UINT64","data":[18446744073709551615]}],"parameters":{"sequence_id":"s","priority":2,"x":1.5}}`, nil},
		{`{"inputs":[{"name":"X","shape":[1],"datatype":"INT32","parameters":{"binary_data_size":4}}]}`, []byte{1, 2}},
		{`{"inputs":[{"name":"X","shape":[1],"datatype":"INT32","parameters":{"shared_memory_region":"r"}}]}`, nil},
		{`{"inputs":[1,]}`, nil},
		{`{"inputs":[{"name":"X","shape":[4294967296,4294967296],"datatype":"INT8","data":[]}]}`, nil},
	}
	for _, s := range seeds {
		b, n := body(s.header, s.blob)
		f.Add(b, n)
	}
	f.Add(le32(1, 2, 3), 0) // a raw binary request
	f.Add([]byte("abc"), 0)
	cfg := identityConfig(pb.DataType_TYPE_INT32, 0, -1)
	f.Fuzz(func(t *testing.T, b []byte, n int) {
		if n < 0 || n > len(b) {
			if _, err := ParseHeaderLength(itoa(n), true, len(b)); err == nil {
				t.Fatalf("header length %d of %d bytes accepted", n, len(b))
			}
			return
		}
		r, err := Parse(b, n, "m", cfg)
		if err != nil {
			var e *Error
			var se *jsonobj.SyntaxError
			if !errors.As(err, &e) && !errors.As(err, &se) || err.Error() == "" {
				t.Fatalf("error %T %q", err, err)
			}
			return
		}
		if n > 0 { // the binary inputs took the data after the header, in order
			next := n
			for _, in := range r.Inputs {
				if off, ok := offset(b, in.Raw); ok && len(in.Raw) > 0 {
					if off != next {
						t.Fatalf("input %s: data at %d, want %d", in.Name, off, next)
					}
					next += len(in.Raw)
				}
			}
			if next != len(b) {
				t.Fatalf("binary inputs took %d of %d bytes", next-n, len(b)-n)
			}
		}
		// Echo every valid input as a binary output.
		out := &pb.ModelInferResponse{ModelName: "m", ModelVersion: "1"}
		echo := &Request{ID: r.ID, BinaryOutput: true}
		var want []byte
		for _, in := range r.Inputs {
			if in.Validate() == nil {
				tensor.ToResponse(out, []*tensor.Tensor{in})
				want = append(want, in.Raw...)
			}
		}
		ans, hl, err := echo.AppendResponse(nil, out)
		if err != nil {
			t.Fatalf("echo: %v", err)
		}
		if hl < 0 {
			hl = len(ans)
		}
		if !json.Valid(ans[:hl]) || !bytes.Equal(ans[hl:], want) {
			t.Fatalf("echo answer %q (header %d), want data %x", ans, hl, want)
		}
	})
}

// offset is where raw starts in b, if it is part of b.
func offset(b, raw []byte) (int, bool) {
	if len(b) == 0 || len(raw) == 0 {
		return 0, false
	}
	d := uintptr(unsafe.Pointer(unsafe.SliceData(raw))) - uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	if d >= uintptr(len(b)) {
		return 0, false
	}
	return int(d), true
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// FuzzParseTree checks the one-pass JSON reader against encoding/json: it
// accepts exactly what json.Valid accepts (or all white space), and reads
// the same strings, numbers and structure.
func FuzzParseTree(f *testing.F) {
	for _, s := range []string{`{"a":[1,-2.5e3,"x\u00e9\ud83d\ude00\ud800",true,null],"b":{}}`, `"\u0000\/"`, `[1,]`, `{"a" 1}`,
		"\"\xff\"", `01`, `-`, `1e`, `[[[]]]`, ` `, `{"k":1,"k":2}`, `"\ud800\u0041"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		n, err := parseTree(b)
		blank := len(bytes.TrimLeft(b, " \t\r\n")) == 0
		if (err == nil) != (json.Valid(b) || blank) {
			t.Fatalf("parseTree(%q) = %v, json.Valid %v", b, err, json.Valid(b))
		}
		if err != nil || blank {
			return
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.UseNumber()
		var want any
		if err := dec.Decode(&want); err != nil {
			t.Fatal(err)
		}
		if got := toAny(n); !reflect.DeepEqual(got, want) {
			t.Fatalf("parseTree(%q) = %#v, encoding/json %#v", b, got, want)
		}
	})
}

// toAny is n as encoding/json decodes it (duplicate keys: the last wins).
func toAny(n node) any {
	switch n.kind {
	case '{':
		m := map[string]any{}
		for i := 0; i+1 < len(n.kids); i += 2 {
			m[n.kids[i].s] = toAny(n.kids[i+1])
		}
		return m
	case '[':
		a := []any{}
		for _, k := range n.kids {
			a = append(a, toAny(k))
		}
		return a
	case '"':
		return n.s
	case '0':
		return json.Number(n.s)
	case 't', 'f':
		return n.kind == 't'
	}
	return nil
}
