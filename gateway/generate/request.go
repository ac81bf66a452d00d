// Package generate maps Triton's generate-extension JSON to and from the
// inference protocol: Parse turns a request body into
// tensors and parameters using the model's input metadata, and Response
// turns one ModelInferResponse into the JSON object of one event.
//
// Error texts follow Triton's where Triton has one. Every error Parse
// returns is the client's fault: an *Error, or a *jsonobj.SyntaxError with
// the position of bad JSON.
package generate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/streamgate/streamgate/gateway/internal/jsonobj"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
	"github.com/streamgate/streamgate/proto/tensor"
)

// Error is a request that cannot be mapped. Msg is safe to show the client.
type Error struct{ Msg string }

func (e *Error) Error() string { return e.Msg }

func errorf(format string, args ...any) *Error { return &Error{Msg: fmt.Sprintf(format, args...)} }

// Request is a parsed generate body.
type Request struct {
	// ID is the body's "id", "" if absent. It is echoed in responses.
	ID string
	// Inputs in the order their keys appeared.
	Inputs []*tensor.Tensor
	// Parameters are the keys that name no input.
	Parameters map[string]*pb.InferParameter
}

// Parse maps body to a Request. inputs is the model's input metadata: a key
// naming an input becomes that tensor, shaped from the metadata; "id" is the
// request id; "parameters" is an object mapped by the same rule; every other
// key becomes a request parameter.
func Parse(body []byte, inputs []*pb.ModelMetadataResponse_TensorMetadata) (*Request, error) {
	members, err := jsonobj.Members(body)
	if err == jsonobj.ErrNotObject {
		return nil, &Error{Msg: "Expected JSON object for the request body"}
	}
	if err != nil {
		return nil, err
	}
	byName := make(map[string]*pb.ModelMetadataResponse_TensorMetadata, len(inputs))
	for _, in := range inputs {
		byName[in.GetName()] = in
	}
	r := &Request{Parameters: map[string]*pb.InferParameter{}}
	seen := map[string]bool{}
	for _, m := range members {
		switch m.Key {
		case "id":
			var id string
			if err := json.Unmarshal(m.Value, &id); err != nil {
				return nil, &Error{Msg: "Unable to parse 'id'"}
			}
			r.ID = id
			continue
		case "parameters":
			inner, err := jsonobj.Members(m.Value)
			if err != nil {
				return nil, &Error{Msg: "Expected JSON object for keyword: 'parameters'"}
			}
			for _, p := range inner {
				if err := r.add(p, byName, seen); err != nil {
					return nil, errorf("Converting keyword: 'parameters': %s", err.Msg)
				}
			}
			continue
		}
		if err := r.add(m, byName, seen); err != nil {
			return nil, err
		}
	}
	return r, nil
}

func (r *Request) add(m jsonobj.Member, byName map[string]*pb.ModelMetadataResponse_TensorMetadata, seen map[string]bool) *Error {
	if seen[m.Key] {
		return errorf("input '%s' already exists in request", m.Key)
	}
	seen[m.Key] = true
	if md, ok := byName[m.Key]; ok {
		t, err := toTensor(m.Key, m.Value, md)
		if err != nil {
			return err
		}
		r.Inputs = append(r.Inputs, t)
		return nil
	}
	if p, err, ok := sequenceParam(m.Key, m.Value); ok {
		if err != nil {
			return err
		}
		r.Parameters[m.Key] = p
		return nil
	}
	p, err := toParameter(m.Key, m.Value)
	if err != nil {
		return err
	}
	r.Parameters[m.Key] = p
	return nil
}

// sequenceParam parses the sequence keys as Triton's HTTP frontend does:
// sequence_id an unsigned integer (sent as int64_param, the protocol's
// form of an integer id) or a string, sequence_start and sequence_end
// booleans. ok is false for any other key.
func sequenceParam(key string, raw json.RawMessage) (p *pb.InferParameter, err *Error, ok bool) {
	bad := &Error{Msg: "Unable to parse '" + key + "'"}
	switch key {
	case "sequence_id":
		v, derr := decodeValue(raw)
		if derr != nil {
			return nil, bad, true
		}
		switch x := v.(type) {
		case json.Number:
			u, perr := strconv.ParseUint(string(x), 10, 64)
			if perr != nil {
				return nil, bad, true
			}
			return &pb.InferParameter{ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: int64(u)}}, nil, true
		case string:
			return &pb.InferParameter{ParameterChoice: &pb.InferParameter_StringParam{StringParam: x}}, nil, true
		}
		return nil, bad, true
	case "sequence_start", "sequence_end":
		var b bool
		if json.Unmarshal(raw, &b) != nil {
			return nil, bad, true
		}
		return &pb.InferParameter{ParameterChoice: &pb.InferParameter_BoolParam{BoolParam: b}}, nil, true
	}
	return nil, nil, false
}

// IsSequenceKey reports whether key is one of the parameters that put a
// request in a sequence.
func IsSequenceKey(key string) bool {
	return key == "sequence_id" || key == "sequence_start" || key == "sequence_end"
}

// BytesInput is input name, one BYTES element holding data, shaped from
// the model's input metadata (as a one-element JSON value would be).
func BytesInput(name string, data []byte, inputs []*pb.ModelMetadataResponse_TensorMetadata) (*tensor.Tensor, error) {
	for _, md := range inputs {
		if md.GetName() != name {
			continue
		}
		if md.GetDatatype() != "BYTES" {
			return nil, errorf("input '%s' is %s: binary chunks fill BYTES inputs", name, md.GetDatatype())
		}
		shape, ok := tensor.FitShape(md.GetShape(), 1)
		if !ok {
			return nil, errorf("The schema can not convert input '%s' to tensor with proper shape", name)
		}
		return tensor.NewBytes(name, shape, [][]byte{data}), nil
	}
	return nil, errorf("unexpected inference input '%s'", name)
}

// ReservedPrefixes are parameter key prefixes a client may not send.
func checkReserved(key string) *Error {
	switch {
	case strings.HasPrefix(key, "triton_") && key != "triton_enable_empty_final_response":
		return &Error{Msg: "parameter keys starting with 'triton_' are reserved for Triton usage. Only the following keys starting with 'triton_' are allowed: triton_enable_empty_final_response"}
	case strings.HasPrefix(key, "streamgate_"):
		return &Error{Msg: "parameter keys starting with 'streamgate_' are reserved for streamgate usage"}
	}
	return nil
}

func toParameter(key string, raw json.RawMessage) (*pb.InferParameter, *Error) {
	if err := checkReserved(key); err != nil {
		return nil, err
	}
	v, err := decodeValue(raw)
	if err != nil {
		return nil, errorf("parameter '%s' has invalid type. It should be either 'int', 'bool', or 'string'.", key)
	}
	switch x := v.(type) {
	case string:
		return &pb.InferParameter{ParameterChoice: &pb.InferParameter_StringParam{StringParam: x}}, nil
	case bool:
		return &pb.InferParameter{ParameterChoice: &pb.InferParameter_BoolParam{BoolParam: x}}, nil
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return &pb.InferParameter{ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: i}}, nil
		}
		if f, err := x.Float64(); err == nil {
			return &pb.InferParameter{ParameterChoice: &pb.InferParameter_DoubleParam{DoubleParam: f}}, nil
		}
	}
	return nil, errorf("parameter '%s' has invalid type. It should be either 'int', 'bool', or 'string'.", key)
}

func decodeValue(raw json.RawMessage) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	err := dec.Decode(&v)
	return v, err
}

// Proto returns the inference request for model and version. The id is
// left empty: upstream assigns its own.
func (r *Request) Proto(model, version string) *pb.ModelInferRequest {
	req := &pb.ModelInferRequest{ModelName: model, ModelVersion: version, Parameters: r.Parameters}
	tensor.ToRequest(req, r.Inputs)
	return req
}
