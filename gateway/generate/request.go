// Package generate maps Triton's generate-extension JSON to and from the
// inference protocol (TRITON.md §4.1): Parse turns a request body into
// tensors and parameters using the model's input metadata, and Response
// turns one ModelInferResponse into the JSON object of one event.
//
// Error texts follow Triton's where Triton has one. Every error Parse
// returns is the client's fault: an *Error, or a *SyntaxError with the
// position of bad JSON.
package generate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	pb "github.com/streamgate/streamgate/proto/inferencepb"
	"github.com/streamgate/streamgate/proto/tensor"
)

// Error is a request that cannot be mapped. Msg is safe to show the client.
type Error struct{ Msg string }

func (e *Error) Error() string { return e.Msg }

func errorf(format string, args ...any) *Error { return &Error{Msg: fmt.Sprintf(format, args...)} }

// SyntaxError is a body that is not valid JSON, with where it went wrong.
type SyntaxError struct {
	Offset       int64 // 0-based byte offset of the first bad byte, len(body) if truncated
	Line, Column int   // 1-based, column counted in bytes
	Msg          string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("failed to parse the request JSON buffer: %s at line %d, column %d (offset %d)", e.Msg, e.Line, e.Column, e.Offset)
}

// NewSyntaxError describes why body is not valid JSON: where the first bad
// byte is (or the end, for truncated input). err is the decoding error seen,
// used only when body turns out to be valid JSON after all (trailing data
// found by a streaming decoder, or a type error).
func NewSyntaxError(body []byte, err error) *SyntaxError {
	idx := int64(len(body))
	msg := "unexpected end of JSON input"
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	if uerr := json.Unmarshal(body, new(any)); errors.As(uerr, &se) {
		err = uerr
	}
	switch {
	case errors.As(err, &se):
		msg = strings.TrimPrefix(se.Error(), "json: ")
		if se.Offset == int64(len(body)) && strings.HasPrefix(msg, "invalid character ' '") && !bytes.HasSuffix(body, []byte(" ")) {
			// encoding/json reports truncation inside a literal as a space
			// fed at the end of input.
			msg = "unexpected end of JSON input"
		}
		if msg != "unexpected end of JSON input" && se.Offset > 0 {
			idx = se.Offset - 1 // Offset counts the offending byte
		}
		if msg == "" {
			msg = "unexpected data after the top-level value"
		}
	case errors.As(err, &te):
		idx, msg = te.Offset, strings.TrimPrefix(te.Error(), "json: ")
	}
	idx = min(max(idx, 0), int64(len(body)))
	line := 1 + bytes.Count(body[:idx], []byte{'\n'})
	col := int(idx) - bytes.LastIndexByte(body[:idx], '\n')
	return &SyntaxError{Offset: idx, Line: line, Column: col, Msg: msg}
}

// Request is a parsed generate body.
type Request struct {
	// ID is the body's "id", "" if absent. It is echoed in responses.
	ID string
	// Inputs in the order their keys appeared.
	Inputs []*tensor.Tensor
	// Parameters are the keys that name no input.
	Parameters map[string]*pb.InferParameter
}

// Member is one key of a JSON object with its undecoded value.
type Member struct {
	Key   string
	Value json.RawMessage
}

// Members decodes a JSON object into its members in order. An empty or
// all-whitespace body is an empty object. Decoding errors are
// *SyntaxError; a value that is not an object gives notObject.
func Members(body []byte, notObject string) ([]Member, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return nil, NewSyntaxError(body, err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		if !json.Valid(body) {
			return nil, NewSyntaxError(body, json.Unmarshal(body, new(any)))
		}
		return nil, &Error{Msg: notObject}
	}
	var out []Member
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, NewSyntaxError(body, err)
		}
		key, _ := tok.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, NewSyntaxError(body, err)
		}
		out = append(out, Member{Key: key, Value: raw})
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return nil, NewSyntaxError(body, err)
	}
	end := dec.InputOffset()
	if _, err := dec.Token(); err != io.EOF {
		if err != nil {
			return nil, NewSyntaxError(body, err)
		}
		rest := body[end:]
		skip := len(rest) - len(bytes.TrimLeft(rest, " \t\r\n"))
		return nil, NewSyntaxError(body, &json.SyntaxError{Offset: end + int64(skip) + 1})
	}
	return out, nil
}

// Parse maps body to a Request. inputs is the model's input metadata: a key
// naming an input becomes that tensor, shaped from the metadata; "id" is the
// request id; "parameters" is an object mapped by the same rule; every other
// key becomes a request parameter.
func Parse(body []byte, inputs []*pb.ModelMetadataResponse_TensorMetadata) (*Request, error) {
	members, err := Members(body, "Expected JSON object for the request body")
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
			inner, err := Members(m.Value, "Expected JSON object for keyword: 'parameters'")
			if err != nil {
				var e *Error
				if errors.As(err, &e) {
					return nil, e
				}
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

func (r *Request) add(m Member, byName map[string]*pb.ModelMetadataResponse_TensorMetadata, seen map[string]bool) *Error {
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
	p, err := toParameter(m.Key, m.Value)
	if err != nil {
		return err
	}
	r.Parameters[m.Key] = p
	return nil
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
	return NewInferRequest(model, version, r.Inputs, r.Parameters)
}

// NewInferRequest builds a request with inputs in raw form.
func NewInferRequest(model, version string, inputs []*tensor.Tensor, params map[string]*pb.InferParameter) *pb.ModelInferRequest {
	req := &pb.ModelInferRequest{ModelName: model, ModelVersion: version, Parameters: params}
	for _, t := range inputs {
		req.Inputs = append(req.Inputs, &pb.ModelInferRequest_InferInputTensor{Name: t.Name, Datatype: t.Datatype, Shape: t.Shape})
		req.RawInputContents = append(req.RawInputContents, t.Raw)
	}
	return req
}
