package upstream

import (
	"errors"
	"math"
	"sync"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

	pb "github.com/streamgate/streamgate/proto/inferencepb"
)

// A frame is one response decoded for its consumer: the wire bytes of a
// ModelStreamInferResponse, copied out of the call's queue into a buffer
// the frame owns, and the ModelInferResponse decoded from them into
// structures the frame keeps from one use to the next. Frames come from a
// pool, and a call hands its frame back whenever its consumer waits or
// the call ends (Call.TryRecv), so that relaying a response allocates
// nothing in steady state:
//
//   - bytes fields (raw_output_contents, typed bytes_contents) alias buf;
//   - strings (model name and version, tensor names, datatypes, parameter
//     keys) stay as they were when the frame's last use carried the same
//     text (keep);
//   - outputs, shapes, parameter maps and typed contents reuse the
//     frame's slices, maps and structs.
//
// The id is not decoded into a string: the stream's reader routes by its
// bytes (scanHeader) and the call puts the caller's id back.
//
// Why a decoder of our own (measured in BenchmarkDecode): protobuf-go's
// Unmarshal allocates every string, map, slice and submessage again, even
// into a reused message (it resets it first); vtprotobuf's pooled,
// unsafe unmarshal reuses slices but still allocates map entries and
// needs a second code generator pinned beside protoc-gen-go. The message
// has a handful of fields, so a decoder over protowire is a few hundred
// lines with no new dependency; frame_test.go checks it against
// proto.Unmarshal field by field and fuzzes it.
type frame struct {
	buf    []byte // the message's wire bytes
	id     []byte // infer_response.id, aliasing buf
	errMsg string // error_message
	// hasResp reports that the message carried infer_response.
	hasResp bool
	resp    pb.ModelInferResponse

	// Storage reused by resp from one use to the next.
	params map[string]*pb.InferParameter // resp.Parameters when it has any
	outs   []*outCell                    // resp.Outputs[i] is &outs[i].t
	ptrs   []*pb.ModelInferResponse_InferOutputTensor
	raw    [][]byte     // resp.RawOutputContents
	cells  []*paramCell // parameter values, handed out in order
	nCells int
	// The model name and version of the frame's last use.
	name, version string
}

// outCell is one output tensor and the storage it reuses.
type outCell struct {
	t        pb.ModelInferResponse_InferOutputTensor
	shape    []int64
	params   map[string]*pb.InferParameter
	contents pb.InferTensorContents
	bytes    [][]byte
}

// paramCell is one parameter value with a wrapper for each oneof choice,
// so that setting any of them allocates nothing.
type paramCell struct {
	key string // the key this cell was last used for
	p   pb.InferParameter
	b   pb.InferParameter_BoolParam
	i   pb.InferParameter_Int64Param
	s   pb.InferParameter_StringParam
	d   pb.InferParameter_DoubleParam
	u   pb.InferParameter_Uint64Param
}

var framePool = sync.Pool{New: func() any { return new(frame) }}

// maxPooledBuf is the largest buffer a frame keeps when it goes back to
// the pool; a larger message's buffer is left to the garbage collector.
const maxPooledBuf = 64 << 10

func getFrame() *frame { return framePool.Get().(*frame) }

// release returns f to the pool. f must not be used afterwards, nor any
// response or bytes it handed out.
func (f *frame) release() {
	if cap(f.buf) > maxPooledBuf {
		f.buf = nil
	}
	f.errMsg = ""
	f.id = nil
	framePool.Put(f)
}

var errFrame = errors.New("malformed ModelStreamInferResponse")

// load copies data into f's buffer and decodes it.
func (f *frame) load(data mem.BufferSlice) error {
	f.buf = copyMsg(f.buf, data)
	return f.decode()
}

// copyMsg copies data into dst's storage, growing it to a bufClass.
func copyMsg(dst []byte, data mem.BufferSlice) []byte {
	n := data.Len()
	if cap(dst) < n {
		dst = make([]byte, n, bufClass(n))
	}
	dst = dst[:n]
	data.CopyTo(dst)
	return dst
}

// bufClass rounds n up to a power of two, from 256, so that pooled buffers
// fit the next message of about the same size.
func bufClass(n int) int {
	c := 256
	for c < n {
		c <<= 1
	}
	return c
}

// nextField reads the first field of the message b: its number, its wire
// type, and its value (a length-delimited field's contents, otherwise the
// value's own bytes, to be read with protowire's Consume functions); rest
// is what follows it.
func nextField(b []byte) (num protowire.Number, typ protowire.Type, v, rest []byte, err error) {
	// Fast path: a length-delimited field numbered 1 to 15 and shorter
	// than 128 bytes has a one-byte tag and a one-byte length, which is
	// nearly every field of a response (the general path costs two calls
	// that do not inline).
	if len(b) >= 2 && b[0] < 0x80 && b[0]&7 == byte(protowire.BytesType) && b[0] >= 1<<3 && b[1] < 0x80 {
		if end := 2 + int(b[1]); end <= len(b) {
			return protowire.Number(b[0] >> 3), protowire.BytesType, b[2:end], b[end:], nil
		}
	}
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 {
		return 0, 0, nil, nil, errFrame
	}
	b = b[n:]
	if typ == protowire.BytesType {
		v, n = protowire.ConsumeBytes(b)
	} else if n = protowire.ConsumeFieldValue(num, typ, b); n >= 0 {
		v = b[:n]
	}
	if n < 0 {
		return 0, 0, nil, nil, errFrame
	}
	return num, typ, v, b[n:], nil
}

// decode parses f.buf as a ModelStreamInferResponse. A field with another
// wire type than its own is skipped, as protobuf treats it (unknown).
func (f *frame) decode() error {
	f.errMsg, f.id, f.hasResp = "", nil, false
	f.nCells = 0
	r := &f.resp
	f.name, f.version = r.ModelName, r.ModelVersion // kept when they repeat
	r.ModelName, r.ModelVersion, r.Id = "", "", ""
	r.Parameters, r.Outputs, r.RawOutputContents = nil, nil, nil
	for b := f.buf; len(b) > 0; {
		num, typ, v, rest, err := nextField(b)
		if err != nil {
			return err
		}
		b = rest
		if typ != protowire.BytesType {
			continue
		}
		switch num {
		case 1:
			f.errMsg = string(v) // rare: errors are allowed to allocate
		case 2:
			// A repeated embedded message merges; our servers send one.
			if err := f.decodeResponse(v); err != nil {
				return err
			}
			f.hasResp = true
		}
	}
	return nil
}

// decodeResponse parses one ModelInferResponse into f.resp.
func (f *frame) decodeResponse(b []byte) error {
	r := &f.resp
	for len(b) > 0 {
		num, typ, v, rest, err := nextField(b)
		if err != nil {
			return err
		}
		b = rest
		if typ != protowire.BytesType {
			continue
		}
		switch num {
		case 1:
			r.ModelName = keep(f.name, v)
		case 2:
			r.ModelVersion = keep(f.version, v)
		case 3:
			f.id = v
		case 4:
			if f.params == nil {
				f.params = map[string]*pb.InferParameter{}
			}
			if r.Parameters == nil {
				clear(f.params)
				r.Parameters = f.params
			}
			if err := f.decodeParamEntry(r.Parameters, v); err != nil {
				return err
			}
		case 5:
			if err := f.decodeOutput(v); err != nil {
				return err
			}
		case 6:
			if r.RawOutputContents == nil {
				r.RawOutputContents = f.raw[:0]
			}
			r.RawOutputContents = append(r.RawOutputContents, v)
			f.raw = r.RawOutputContents
		}
	}
	return nil
}

// decodeOutput parses one InferOutputTensor and appends it to
// f.resp.Outputs.
func (f *frame) decodeOutput(b []byte) error {
	r := &f.resp
	i := len(r.Outputs)
	if i == len(f.outs) {
		f.outs = append(f.outs, new(outCell))
	}
	c := f.outs[i]
	t := &c.t
	name, dt := t.Name, t.Datatype
	t.Name, t.Datatype, t.Shape, t.Parameters, t.Contents = "", "", nil, nil, nil
	shape := c.shape[:0]
	for len(b) > 0 {
		num, typ, v, rest, err := nextField(b)
		if err != nil {
			return err
		}
		b = rest
		switch {
		case num == 1 && typ == protowire.BytesType:
			t.Name = keep(name, v)
		case num == 2 && typ == protowire.BytesType:
			t.Datatype = keep(dt, v)
		case num == 3 && (typ == protowire.BytesType || typ == protowire.VarintType): // packed or not
			for len(v) > 0 {
				x, m := protowire.ConsumeVarint(v)
				if m < 0 {
					return errFrame
				}
				shape = append(shape, int64(x))
				v = v[m:]
			}
		case num == 4 && typ == protowire.BytesType:
			if c.params == nil {
				c.params = map[string]*pb.InferParameter{}
			}
			if t.Parameters == nil {
				clear(c.params)
				t.Parameters = c.params
			}
			if err := f.decodeParamEntry(t.Parameters, v); err != nil {
				return err
			}
		case num == 5 && typ == protowire.BytesType:
			if t.Contents == nil {
				resetContents(c)
				t.Contents = &c.contents
			}
			if err := decodeContents(c, v); err != nil {
				return err
			}
		}
	}
	c.shape = shape
	if len(shape) > 0 {
		t.Shape = shape
	}
	if i == len(f.ptrs) {
		f.ptrs = append(f.ptrs, t)
	}
	f.ptrs[i] = t
	r.Outputs = f.ptrs[:i+1]
	return nil
}

// decodeParamEntry parses one map<string, InferParameter> entry into m.
func (f *frame) decodeParamEntry(m map[string]*pb.InferParameter, b []byte) error {
	key, val, err := mapEntry(b)
	if err != nil {
		return err
	}
	if f.nCells == len(f.cells) {
		f.cells = append(f.cells, new(paramCell))
	}
	c := f.cells[f.nCells]
	f.nCells++
	c.p.ParameterChoice = nil
	for len(val) > 0 {
		num, typ, v, rest, err := nextField(val)
		if err != nil {
			return err
		}
		val = rest
		switch {
		case num == 1 && typ == protowire.VarintType:
			x, _ := protowire.ConsumeVarint(v)
			c.b.BoolParam = protowire.DecodeBool(x)
			c.p.ParameterChoice = &c.b
		case num == 2 && typ == protowire.VarintType:
			x, _ := protowire.ConsumeVarint(v)
			c.i.Int64Param = int64(x)
			c.p.ParameterChoice = &c.i
		case num == 3 && typ == protowire.BytesType:
			c.s.StringParam = keep(c.s.StringParam, v)
			c.p.ParameterChoice = &c.s
		case num == 4 && typ == protowire.Fixed64Type:
			x, _ := protowire.ConsumeFixed64(v)
			c.d.DoubleParam = math.Float64frombits(x)
			c.p.ParameterChoice = &c.d
		case num == 5 && typ == protowire.VarintType:
			x, _ := protowire.ConsumeVarint(v)
			c.u.Uint64Param = x
			c.p.ParameterChoice = &c.u
		}
	}
	c.key = keep(c.key, key)
	m[c.key] = &c.p
	return nil
}

// mapEntry reads a map<string, message> entry: its key and its value's
// bytes (repeated fields: the last key and the value fields concatenated,
// which merges them as protobuf does).
func mapEntry(b []byte) (key, val []byte, err error) {
	first := true
	for len(b) > 0 {
		num, typ, v, rest, err := nextField(b)
		if err != nil {
			return nil, nil, err
		}
		if typ == protowire.BytesType {
			switch num {
			case 1:
				key = v
			case 2:
				if first {
					val, first = v, false
				} else {
					val = append(append([]byte(nil), val...), v...) // rare
				}
			}
		}
		b = rest
	}
	return key, val, nil
}

// resetContents empties c's typed contents, keeping their storage.
func resetContents(c *outCell) {
	t := &c.contents
	t.BoolContents, t.IntContents, t.Int64Contents = t.BoolContents[:0], t.IntContents[:0], t.Int64Contents[:0]
	t.UintContents, t.Uint64Contents = t.UintContents[:0], t.Uint64Contents[:0]
	t.Fp32Contents, t.Fp64Contents = t.Fp32Contents[:0], t.Fp64Contents[:0]
	c.bytes = c.bytes[:0]
	t.BytesContents = nil
}

// decodeContents parses InferTensorContents into c.contents, packed or
// not, appending (a repeated embedded message merges).
func decodeContents(c *outCell, b []byte) error {
	t := &c.contents
	for len(b) > 0 {
		num, typ, v, rest, err := nextField(b)
		if err != nil {
			return err
		}
		b = rest
		switch {
		case num == 8 && typ == protowire.BytesType:
			c.bytes = append(c.bytes, v)
			t.BytesContents = c.bytes
		case num >= 1 && num <= 7:
			if err := appendScalars(t, num, typ, v); err != nil {
				return err
			}
		}
	}
	return nil
}

// appendScalars appends the elements of one packed run (typ BytesType) or
// one unpacked element of field num to t. A wrong wire type is an unknown
// field: skipped.
func appendScalars(t *pb.InferTensorContents, num protowire.Number, typ protowire.Type, run []byte) error {
	want := protowire.VarintType
	switch num {
	case 6:
		want = protowire.Fixed32Type
	case 7:
		want = protowire.Fixed64Type
	}
	if typ != want && typ != protowire.BytesType {
		return nil
	}
	for len(run) > 0 {
		var x uint64
		var n int
		switch want {
		case protowire.Fixed32Type:
			var v uint32
			v, n = protowire.ConsumeFixed32(run)
			x = uint64(v)
		case protowire.Fixed64Type:
			x, n = protowire.ConsumeFixed64(run)
		default:
			x, n = protowire.ConsumeVarint(run)
		}
		if n < 0 {
			return errFrame
		}
		run = run[n:]
		switch num {
		case 1:
			t.BoolContents = append(t.BoolContents, protowire.DecodeBool(x))
		case 2:
			t.IntContents = append(t.IntContents, int32(x))
		case 3:
			t.Int64Contents = append(t.Int64Contents, int64(x))
		case 4:
			t.UintContents = append(t.UintContents, uint32(x))
		case 5:
			t.Uint64Contents = append(t.Uint64Contents, x)
		case 6:
			t.Fp32Contents = append(t.Fp32Contents, math.Float32frombits(uint32(x)))
		case 7:
			t.Fp64Contents = append(t.Fp64Contents, math.Float64frombits(x))
		}
	}
	return nil
}

// keep returns b as a string: prev when it holds the same text (a reused
// field's last value), so that repeated texts allocate nothing.
func keep(prev string, b []byte) string {
	if string(b) == prev {
		return prev
	}
	return string(b)
}

// header is what a stream's reader reads of a message to route it; the
// rest is decoded by the call's consumer.
type header struct {
	id     []byte // infer_response.id
	errMsg []byte // error_message
	// final: the parameter triton_final_response is true.
	final bool
	// flagsOnly: no outputs, and no parameter but triton_final_response.
	flagsOnly bool
}

const finalParam = "triton_final_response"

// scanHeader reads h from the wire bytes of a ModelStreamInferResponse,
// checking the structure it walks. It allocates nothing.
func scanHeader(b []byte) (h header, err error) {
	h.flagsOnly = true
	for len(b) > 0 {
		num, typ, v, rest, err := nextField(b)
		if err != nil {
			return h, err
		}
		b = rest
		if typ != protowire.BytesType {
			continue
		}
		switch num {
		case 1:
			h.errMsg = v
		case 2:
			if err := h.scanResponse(v); err != nil {
				return h, err
			}
		}
	}
	return h, nil
}

func (h *header) scanResponse(b []byte) error {
	for len(b) > 0 {
		num, typ, v, rest, err := nextField(b)
		if err != nil {
			return err
		}
		b = rest
		if typ != protowire.BytesType {
			continue
		}
		switch num {
		case 3:
			h.id = v
		case 4:
			key, final, err := scanParamEntry(v)
			if err != nil {
				return err
			}
			if string(key) == finalParam {
				h.final = final
			} else {
				h.flagsOnly = false
			}
		case 5, 6:
			h.flagsOnly = false
		}
	}
	return nil
}

// scanParamEntry reads a parameters map entry's key and whether its value
// is bool_param true (the last choice of its oneof wins).
func scanParamEntry(b []byte) (key []byte, isTrue bool, err error) {
	key, val, err := mapEntry(b)
	if err != nil {
		return nil, false, err
	}
	for len(val) > 0 {
		num, typ, v, rest, err := nextField(val)
		if err != nil {
			return nil, false, err
		}
		val = rest
		switch {
		case num == 1 && typ == protowire.VarintType:
			x, _ := protowire.ConsumeVarint(v)
			isTrue = x != 0
		case num == 2 && typ == protowire.VarintType, num == 3 && typ == protowire.BytesType,
			num == 4 && typ == protowire.Fixed64Type, num == 5 && typ == protowire.VarintType:
			isTrue = false // another choice of the oneof replaces it
		}
	}
	return key, isTrue, nil
}
