package tritonhttp

import (
	"encoding/binary"
	"math"
	"strings"

	"google.golang.org/grpc/codes"

	pb "github.com/streamgate/streamgate/proto/inferencepb"
	"github.com/streamgate/streamgate/proto/tensor"
)

// HeaderLength is the HTTP header of Triton's binary tensor data
// extension: the byte length of the JSON part of a request or response
// body, the raw tensor data following it.
const HeaderLength = "Inference-Header-Content-Length"

// Request is a parsed /infer body.
type Request struct {
	// ID is the body's "id", "" if absent; the response echoes it.
	ID string
	// Parameters are the request parameters, mapped to the gRPC protocol's
	// (sequence_id int64 or string, sequence_start/sequence_end bool,
	// priority uint64, timeout int64, the rest as given).
	Parameters map[string]*pb.InferParameter
	// Inputs in request order, in the raw layout.
	Inputs []*tensor.Tensor
	// Outputs are the requested outputs in order; none means every output.
	Outputs []Output
	// BinaryOutput is how outputs not in Outputs are returned: the
	// parameter binary_data_output, always true for a raw binary request.
	BinaryOutput bool
}

// Output is one requested output.
type Output struct {
	Name string
	// Binary: its data follows the JSON (parameter binary_data), rather
	// than being its "data" array.
	Binary bool
}

// Proto returns the inference request for model and version.
func (r *Request) Proto(model, version string) *pb.ModelInferRequest {
	req := &pb.ModelInferRequest{ModelName: model, ModelVersion: version, Id: r.ID, Parameters: r.Parameters}
	tensor.ToRequest(req, r.Inputs)
	for _, o := range r.Outputs {
		req.Outputs = append(req.Outputs, &pb.ModelInferRequest_InferRequestedOutputTensor{Name: o.Name})
	}
	return req
}

// binary reports whether output name is returned as binary data.
func (r *Request) binary(name string) bool {
	for _, o := range r.Outputs {
		if o.Name == name {
			return o.Binary
		}
	}
	return r.BinaryOutput
}

// ParseHeaderLength returns the length of the JSON part of a body of
// bodyLen bytes, as Triton reads header HeaderLength (value; present false
// when the request has none): the whole body without it, else value read
// as C's atoi reads it (garbage is 0). 0 means a raw binary request: the
// whole body is the data of the model's one input.
func ParseHeaderLength(value string, present bool, bodyLen int) (int, error) {
	if !present {
		return bodyLen, nil
	}
	n := atoi(value)
	if n < 0 || n > int64(bodyLen) {
		return 0, invalid("inference header size should be in range (0, %d), got: %s", bodyLen, value)
	}
	return int(n), nil
}

// atoi is C's atoi: leading white space, an optional sign, then digits up
// to the first non-digit; saturating instead of overflowing.
func atoi(s string) int64 {
	s = strings.TrimLeft(s, " \t\n\v\f\r")
	neg := false
	if s != "" && (s[0] == '+' || s[0] == '-') {
		neg = s[0] == '-'
		s = s[1:]
	}
	var n int64
	for i := 0; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
		if n > (math.MaxInt64-9)/10 {
			n = math.MaxInt64
			break
		}
		n = n*10 + int64(s[i]-'0')
	}
	if neg {
		return -n
	}
	return n
}

// Parse reads an /infer body whose JSON part is its first headerLen bytes
// (ParseHeaderLength), the raw data of the binary inputs following it in
// input order. headerLen 0 is a raw binary request: cfg (the model's
// config) then gives the one input's name, datatype and shape. model names
// the model in error texts. The tensors alias body.
//
// Errors are *Error, or *jsonobj.SyntaxError for a JSON part that does not
// parse.
func Parse(body []byte, headerLen int, model string, cfg *pb.ModelConfig) (*Request, error) {
	if headerLen == 0 {
		return parseRaw(body, model, cfg)
	}
	p := &parser{model: model, data: body[headerLen:]}
	return p.parse(body[:headerLen])
}

// parseRaw is a raw binary request: the body is the data of the model's
// only input, whose shape is deduced from its config (Triton core's
// InferenceRequest::Normalize).
func parseRaw(body []byte, model string, cfg *pb.ModelConfig) (*Request, error) {
	ins := cfg.GetInput()
	if len(ins) != 1 {
		return nil, invalid("Raw request must only have 1 input (found 1) to be deduced but got %d inputs in '%s' model configuration", len(ins), model)
	}
	in := ins[0]
	var shape []int64
	if cfg.GetMaxBatchSize() != 0 {
		shape = append(shape, 1)
	}
	dynamic, count := -1, int64(1)
	for _, d := range in.GetDims() {
		if d == -1 {
			if dynamic != -1 {
				return nil, invalid("The shape of the raw input '%s' can not be deduced because there are more than one variable-sized dimension", in.GetName())
			}
			dynamic = len(shape)
		} else {
			count *= d
		}
		shape = append(shape, d)
	}
	dt := Datatype(in.GetDataType())
	raw := body
	switch size := int64(tensor.ElementSize(dt)); {
	case dt == "BYTES":
		if dynamic != -1 || count != 1 {
			return nil, invalid("For BYTE datatype raw input '%s', the model must have input shape [1]", in.GetName())
		}
		raw = binary.LittleEndian.AppendUint32(make([]byte, 0, 4+len(body)), uint32(len(body)))
		raw = append(raw, body...)
	case dynamic != -1 && count > 0 && size > 0:
		shape[dynamic] = int64(len(body)) / count / size
	case dynamic != -1:
		shape[dynamic] = 0
	}
	return &Request{
		Inputs:       []*tensor.Tensor{{Name: in.GetName(), Datatype: dt, Shape: shape, Raw: raw}},
		BinaryOutput: true,
	}, nil
}

// Datatype is the protocol's name of a config datatype (TYPE_STRING is
// BYTES).
func Datatype(dt pb.DataType) string {
	if dt == pb.DataType_TYPE_STRING {
		return "BYTES"
	}
	return strings.TrimPrefix(dt.String(), "TYPE_")
}

// parser reads one JSON request, in Triton's order: id, parameters, then
// each input (taking binary data from data in turn), then outputs.
type parser struct {
	model string
	data  []byte // binary data not yet taken
	req   Request
	log   string // Triton's LogRequest() prefix: "[request id: <id>] " once an id is set
}

func (p *parser) parse(header []byte) (*Request, error) {
	top, err := parseTree(header) // not an object: no members, as Triton finds none
	if err != nil {
		return nil, err
	}
	if v, ok := top.find("id"); ok {
		id, e := asString(v)
		if e != nil {
			return nil, wrap("Unable to parse 'id'", e)
		}
		p.req.ID = id
		if id != "" {
			p.log = "[request id: " + id + "] "
		}
	}
	if v, ok := top.find("parameters"); ok {
		if e := p.parameters(v); e != nil {
			return nil, e
		}
	}
	inputs, e := top.memberAsArray("inputs")
	if e != nil {
		return nil, wrap("Unable to parse 'inputs'", e)
	}
	seen := map[string]bool{}
	for _, in := range inputs {
		t, e := p.input(in)
		if e != nil {
			return nil, e
		}
		if seen[t.Name] {
			return nil, invalid("%sinput '%s' already exists in request", p.log, t.Name)
		}
		seen[t.Name] = true
		p.req.Inputs = append(p.req.Inputs, t)
	}
	if len(p.data) != 0 {
		return nil, invalid("unexpected additional input data for model '%s'", p.model)
	}
	if _, ok := top.find("outputs"); ok {
		outputs, e := top.memberAsArray("outputs")
		if e != nil {
			return nil, wrap("Unable to parse 'outputs'", e)
		}
		for _, out := range outputs {
			if e := p.output(out); e != nil {
				return nil, e
			}
		}
	}
	return &p.req, nil
}

// input reads one input (Triton's ParseJsonTritonIO).
func (p *parser) input(in node) (*tensor.Tensor, *Error) {
	params := p.paramsOf(in)
	_, hasData := in.find("data")
	_, hasBinary := params.find("binary_data_size")
	_, hasShm := params.find("shared_memory_region")
	if set := btoi(hasData) + btoi(hasBinary) + btoi(hasShm); set != 1 {
		msg := "Input must set only one of the following fields: 'data', 'binary_data_size' in 'parameters', 'shared_memory_region' in 'parameters'. But"
		if set == 0 {
			msg += " no field is set"
		} else {
			msg += " set"
			for _, f := range []struct {
				set  bool
				name string
			}{{hasData, "data"}, {hasBinary, "binary_data_size"}, {hasShm, "shared_memory_region"}} {
				if f.set {
					msg += " '" + f.name + "'"
				}
			}
		}
		return nil, invalid("%s", msg)
	}
	name, e := in.memberAsString("name")
	if e != nil {
		return nil, wrap("Unable to parse 'name'", e)
	}
	dt, e := in.memberAsString("datatype")
	if e != nil {
		return nil, wrap("Unable to parse 'datatype'", e)
	}
	dims, e := in.memberAsArray("shape")
	if e != nil {
		return nil, wrap("Unable to parse 'shape'", e)
	}
	shape := make([]int64, 0, len(dims))
	for _, d := range dims {
		u, e := asUint(d)
		if e != nil {
			return nil, wrap("Unable to parse 'shape'", e)
		}
		shape = append(shape, int64(u))
	}
	t := &tensor.Tensor{Name: name, Datatype: dt, Shape: shape}
	switch {
	case hasBinary:
		v, _ := params.find("binary_data_size")
		size, e := asUint(v)
		if e != nil {
			return nil, wrap("Unable to parse 'binary_data_size'", e)
		}
		if size > uint64(len(p.data)) {
			return nil, invalid("unexpected size for input '%s', expecting %d additional bytes for model '%s'", name, size-uint64(len(p.data)), p.model)
		}
		t.Raw, p.data = p.data[:size:size], p.data[size:]
	case hasShm:
		return nil, sharedMemory(params)
	default:
		raw, e := p.jsonData(in, name, dt, shape)
		if e != nil {
			return nil, e
		}
		t.Raw = raw
	}
	return t, nil
}

// paramsOf returns an input's or output's "parameters" (not found: a
// node in which nothing is found).
func (p *parser) paramsOf(o node) node {
	v, _ := o.find("parameters")
	return v
}

// sharedMemory refuses an input or output in a shared memory region:
// streamgate registers none, so every region is unknown.
func sharedMemory(params node) *Error {
	v, _ := params.find("shared_memory_region")
	region, e := asString(v)
	if e != nil {
		return wrap("Unable to parse 'shared_memory_region'", e)
	}
	for _, k := range []string{"shared_memory_offset", "shared_memory_byte_size"} {
		if v, ok := params.find(k); ok {
			if _, e := asUint(v); e != nil {
				return wrap("Unable to parse '"+k+"'", e)
			}
		}
	}
	return &Error{Code: codes.NotFound, Msg: "Unable to find shared memory region: '" + region + "'"}
}

// output reads one requested output.
func (p *parser) output(out node) *Error {
	params := p.paramsOf(out)
	if _, ok := params.find("shared_memory_region"); ok {
		if _, ok := params.find("classification"); ok {
			return invalid("Output can't set both 'shared_memory_region' and 'classification'")
		}
		if v, ok := params.find("binary_data"); ok {
			b, e := asBool(v)
			if e != nil {
				return wrap("Unable to set 'binary_data'", e)
			}
			if b {
				return invalid("Output can't set both 'shared_memory_region' and 'binary_data'")
			}
		}
	}
	name, e := out.memberAsString("name")
	if e != nil {
		return wrap("Unable to parse 'name'", e)
	}
	if v, ok := params.find("classification"); ok {
		n, e := asUint(v)
		if e != nil {
			return wrap("Unable to set 'classification'", e)
		}
		if n > 0 {
			return &Error{Code: codes.Unimplemented, Msg: "output '" + name + "': classification is not supported by streamgate"}
		}
	}
	if _, ok := params.find("shared_memory_region"); ok {
		return sharedMemory(params)
	}
	o := Output{Name: name}
	if v, ok := params.find("binary_data"); ok {
		b, e := asBool(v)
		if e != nil {
			return wrap("Unable to parse 'binary_data'", e)
		}
		o.Binary = b
	}
	for _, prev := range p.req.Outputs {
		if prev.Name == name {
			return nil // a set in Triton: the first one counts
		}
	}
	p.req.Outputs = append(p.req.Outputs, o)
	return nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
