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

// decode parses f.buf as a ModelStreamInferResponse.
func (f *frame) decode() error {
	f.errMsg, f.id, f.hasResp = "", nil, false
	f.nCells = 0
	r := &f.resp
	f.name, f.version = r.ModelName, r.ModelVersion // kept when they repeat
	r.ModelName, r.ModelVersion, r.Id = "", "", ""
	r.Parameters, r.Outputs, r.RawOutputContents = nil, nil, nil
	b := f.buf
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return errFrame
		}
		b = b[n:]
		switch {
		case num == 1 && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return errFrame
			}
			f.errMsg = string(v) // rare: errors are allowed to allocate
			b = b[n:]
		case num == 2 && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return errFrame
			}
			// A repeated embedded message merges; our servers send one.
			if err := f.decodeResponse(v); err != nil {
				return err
			}
			f.hasResp = true
			b = b[n:]
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return errFrame
			}
			b = b[n:]
		}
	}
	if len(r.Outputs) == 0 {
		r.Outputs = nil
	}
	if len(r.RawOutputContents) == 0 {
		r.RawOutputContents = nil
	}
	return nil
}

// decodeResponse parses one ModelInferResponse into f.resp.
func (f *frame) decodeResponse(b []byte) error {
	r := &f.resp
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return errFrame
		}
		b = b[n:]
		if typ != protowire.BytesType || num < 1 || num > 6 {
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return errFrame
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return errFrame
		}
		b = b[n:]
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
	hasShape := false
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return errFrame
		}
		b = b[n:]
		switch {
		case num == 1 && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return errFrame
			}
			t.Name = keep(name, v)
			b = b[n:]
		case num == 2 && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return errFrame
			}
			t.Datatype = keep(dt, v)
			b = b[n:]
		case num == 3 && typ == protowire.BytesType: // packed
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return errFrame
			}
			for len(v) > 0 {
				x, m := protowire.ConsumeVarint(v)
				if m < 0 {
					return errFrame
				}
				shape = append(shape, int64(x))
				v = v[m:]
			}
			hasShape = true
			b = b[n:]
		case num == 3 && typ == protowire.VarintType:
			x, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return errFrame
			}
			shape = append(shape, int64(x))
			hasShape = true
			b = b[n:]
		case num == 4 && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return errFrame
			}
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
			b = b[n:]
		case num == 5 && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return errFrame
			}
			if t.Contents == nil {
				resetContents(c)
				t.Contents = &c.contents
			}
			if err := decodeContents(c, v); err != nil {
				return err
			}
			b = b[n:]
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return errFrame
			}
			b = b[n:]
		}
	}
	c.shape = shape
	if hasShape && len(shape) > 0 {
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
	var key []byte
	var val []byte
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return errFrame
		}
		b = b[n:]
		if (num == 1 || num == 2) && typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return errFrame
			}
			if num == 1 {
				key = v
			} else {
				val = v
			}
			b = b[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return errFrame
		}
		b = b[n:]
	}
	if f.nCells == len(f.cells) {
		f.cells = append(f.cells, new(paramCell))
	}
	c := f.cells[f.nCells]
	f.nCells++
	c.p.ParameterChoice = nil
	for len(val) > 0 {
		num, typ, n := protowire.ConsumeTag(val)
		if n < 0 {
			return errFrame
		}
		val = val[n:]
		switch {
		case num == 1 && typ == protowire.VarintType:
			x, n := protowire.ConsumeVarint(val)
			if n < 0 {
				return errFrame
			}
			c.b.BoolParam = protowire.DecodeBool(x)
			c.p.ParameterChoice = &c.b
			val = val[n:]
		case num == 2 && typ == protowire.VarintType:
			x, n := protowire.ConsumeVarint(val)
			if n < 0 {
				return errFrame
			}
			c.i.Int64Param = int64(x)
			c.p.ParameterChoice = &c.i
			val = val[n:]
		case num == 3 && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(val)
			if n < 0 {
				return errFrame
			}
			c.s.StringParam = keep(c.s.StringParam, v)
			c.p.ParameterChoice = &c.s
			val = val[n:]
		case num == 4 && typ == protowire.Fixed64Type:
			x, n := protowire.ConsumeFixed64(val)
			if n < 0 {
				return errFrame
			}
			c.d.DoubleParam = math.Float64frombits(x)
			c.p.ParameterChoice = &c.d
			val = val[n:]
		case num == 5 && typ == protowire.VarintType:
			x, n := protowire.ConsumeVarint(val)
			if n < 0 {
				return errFrame
			}
			c.u.Uint64Param = x
			c.p.ParameterChoice = &c.u
			val = val[n:]
		default:
			n := protowire.ConsumeFieldValue(num, typ, val)
			if n < 0 {
				return errFrame
			}
			val = val[n:]
		}
	}
	c.key = keep(c.key, key)
	m[c.key] = &c.p
	return nil
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
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return errFrame
		}
		b = b[n:]
		if num == 8 && typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return errFrame
			}
			c.bytes = append(c.bytes, v)
			t.BytesContents = c.bytes
			b = b[n:]
			continue
		}
		if num < 1 || num > 7 {
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return errFrame
			}
			b = b[n:]
			continue
		}
		// A packed run, or one unpacked element.
		var run []byte
		switch {
		case typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return errFrame
			}
			run, b = v, b[n:]
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return errFrame
			}
			run, b = b[:n], b[n:]
		}
		if err := appendScalars(t, num, typ, run); err != nil {
			return err
		}
	}
	return nil
}

// appendScalars appends the elements of one packed run (typ BytesType) or
// one unpacked element of field num to t.
func appendScalars(t *pb.InferTensorContents, num protowire.Number, typ protowire.Type, run []byte) error {
	fixed := num == 6 || num == 7
	packed := typ == protowire.BytesType
	switch {
	case !packed && fixed && num == 6 && typ != protowire.Fixed32Type,
		!packed && fixed && num == 7 && typ != protowire.Fixed64Type,
		!packed && !fixed && typ != protowire.VarintType:
		return nil // wrong wire type: unknown field, skipped
	}
	for len(run) > 0 {
		var x uint64
		var n int
		switch num {
		case 6:
			var v uint32
			v, n = protowire.ConsumeFixed32(run)
			x = uint64(v)
		case 7:
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
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return h, errFrame
		}
		b = b[n:]
		if typ != protowire.BytesType || (num != 1 && num != 2) {
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return h, errFrame
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return h, errFrame
		}
		b = b[n:]
		if num == 1 {
			h.errMsg = v
			continue
		}
		if err := h.scanResponse(v); err != nil {
			return h, err
		}
	}
	return h, nil
}

func (h *header) scanResponse(b []byte) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return errFrame
		}
		b = b[n:]
		if typ != protowire.BytesType {
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return errFrame
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return errFrame
		}
		b = b[n:]
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
// is bool_param true.
func scanParamEntry(b []byte) (key []byte, isTrue bool, err error) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, false, errFrame
		}
		b = b[n:]
		if (num != 1 && num != 2) || typ != protowire.BytesType {
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return nil, false, errFrame
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return nil, false, errFrame
		}
		b = b[n:]
		if num == 1 {
			key = v
			continue
		}
		for len(v) > 0 { // a repeated value merges: the last choice wins
			vn, vt, m := protowire.ConsumeTag(v)
			if m < 0 {
				return nil, false, errFrame
			}
			v = v[m:]
			if vn == 1 && vt == protowire.VarintType {
				x, m := protowire.ConsumeVarint(v)
				if m < 0 {
					return nil, false, errFrame
				}
				isTrue = x != 0
				v = v[m:]
				continue
			}
			m = protowire.ConsumeFieldValue(vn, vt, v)
			if m < 0 {
				return nil, false, errFrame
			}
			if vn >= 2 && vn <= 5 { // another choice of the oneof replaces it
				isTrue = false
			}
			v = v[m:]
		}
	}
	return key, isTrue, nil
}
