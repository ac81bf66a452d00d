package wsapi

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"net/http"
	"time"

	"github.com/streamgate/streamgate/gateway/core"
	"github.com/streamgate/streamgate/gateway/generate"
	"github.com/streamgate/streamgate/gateway/jobs"
	"github.com/streamgate/streamgate/gateway/ws"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
	"github.com/streamgate/streamgate/proto/tensor"
)

// Client-side streaming over the WebSocket: a sequence.start request is a
// Triton sequence (a stateful model's requests that share a correlation
// id). Each of its chunks is one inference request that lives the one
// life of serve, in order: the next chunk starts once the previous one has
// ended, so its responses come out in order on any upstream; their data
// frames all carry the sequence's id, and its terminal frame ends it.
// The gateway assigns the correlation id, unique across sockets and
// replicas, and upstream keeps every chunk of it on the target (and
// stream) its START went to.

// sequenceModel is what a sequence needs to know of its model.
type sequenceModel struct {
	md       *pb.ModelMetadataResponse
	stringID bool          // its CORRID control is TYPE_STRING: string correlation ids
	idle     time.Duration // ends idle sequences before the model's reaper would; 0: no limit of its own
}

// errNotSequence refuses a sequence for a model without sequence_batching:
// its chunks would run unrelated, each as a request of its own.
func errNotSequence(model string) error {
	return &core.HTTPError{Status: http.StatusBadRequest, Code: "bad_request", Param: "model",
		Msg: "model '" + model + "' is not a sequence model: its config has no sequence_batching"}
}

func (s *API) sequenceModel(ctx context.Context, model, version string) (*sequenceModel, error) {
	md, err := s.Metadata(ctx, model, version)
	if err != nil {
		return nil, err
	}
	sm := &sequenceModel{md: md}
	cfg, err := s.ModelConfig(ctx, model, version)
	if err != nil {
		return nil, err
	}
	sb := cfg.GetSequenceBatching()
	if sb == nil {
		return nil, errNotSequence(model)
	}
	for _, c := range sb.GetControlInput() {
		for _, k := range c.GetControl() {
			if k.GetKind() == pb.ModelSequenceBatching_Control_CONTROL_SEQUENCE_CORRID && k.GetDataType() == pb.DataType_TYPE_STRING {
				sm.stringID = true
			}
		}
	}
	if us := sb.GetMaxSequenceIdleMicroseconds(); us > 0 {
		// A tenth before the model's reaper: the gateway ends the
		// sequence with a clear error while the model still holds it.
		sm.idle = time.Duration(us) * time.Microsecond * 9 / 10
	}
	return sm, nil
}

// newCorrelationID is a fresh upstream sequence id: 63 random bits (an
// int64_param, as Triton's clients send integer ids), or "sg-" and 16 hex
// digits for models with string ids.
func newCorrelationID(stringID bool) *pb.InferParameter {
	var b [8]byte
	_, _ = rand.Read(b[:])
	if stringID {
		return &pb.InferParameter{ParameterChoice: &pb.InferParameter_StringParam{StringParam: "sg-" + hex.EncodeToString(b[:])}}
	}
	id := int64(binary.LittleEndian.Uint64(b[:]) >> 1)
	if id == 0 {
		id = 1
	}
	return &pb.InferParameter{ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: id}}
}

// wsSequence runs a sequence.start request to its end: the frame's body
// is the first chunk, then each chunk the client adds, until the one that
// ends the sequence.
func (s *API) wsSequence(ctx context.Context, req *ws.Request, emit func([]byte) error) error {
	if req.Sequence == nil {
		return &core.HTTPError{Status: http.StatusBadRequest, Code: "bad_request", Msg: "a sequence runs on a WebSocket session only"}
	}
	sm, err := s.sequenceModel(ctx, req.Model, req.Version)
	if err != nil {
		return err
	}
	id := newCorrelationID(sm.stringID)
	out := s.NewWSSink(emit)
	chunk := ws.Chunk{Body: req.Body}
	for first := true; ; first = false {
		j, err := sm.chunkJob(req, chunk)
		if err != nil {
			return err
		}
		p := j.Req.Parameters
		p["sequence_id"] = id
		p["sequence_start"] = &pb.InferParameter{ParameterChoice: &pb.InferParameter_BoolParam{BoolParam: first}}
		p["sequence_end"] = &pb.InferParameter{ParameterChoice: &pb.InferParameter_BoolParam{BoolParam: chunk.End}}
		if err := s.Serve(ctx, "", j, out); err != nil {
			return err
		}
		if chunk.End {
			return nil
		}
		if chunk, err = req.Sequence.Next(ctx, sm.idle); err != nil {
			return err
		}
	}
}

// chunkJob is one chunk's inference request: a text chunk's body in the
// generate mapping (without the sequence keys, which the gateway sets),
// or a binary chunk's bytes as its input.
func (sm *sequenceModel) chunkJob(req *ws.Request, c ws.Chunk) (*core.Job, error) {
	if c.Body == nil {
		t, err := generate.BytesInput(c.Input, c.Data, sm.md.GetInputs())
		if err != nil {
			return nil, err
		}
		gr := &generate.Request{Inputs: []*tensor.Tensor{t}, Parameters: map[string]*pb.InferParameter{}}
		return &core.Job{Req: gr.Proto(req.Model, req.Version), Tr: jobs.GenerateEvents(""), Op: core.OpGenerate}, nil
	}
	gr, err := generate.Parse(c.Body, sm.md.GetInputs())
	if err != nil {
		return nil, err
	}
	for k := range gr.Parameters {
		if generate.IsSequenceKey(k) {
			return nil, &core.HTTPError{Status: http.StatusBadRequest, Code: "bad_request",
				Msg: "'" + k + "' is set by the gateway in sequence frames"}
		}
	}
	return &core.Job{Req: gr.Proto(req.Model, req.Version), Tr: jobs.GenerateEvents(gr.ID), Op: core.OpGenerate}, nil
}
