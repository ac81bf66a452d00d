package jobs

import (
	"context"

	"github.com/streamgate/streamgate/gateway/core"
	"github.com/streamgate/streamgate/gateway/generate"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
)

// GenerateEvents returns the translator of a generate_stream: every
// response is one event of Triton's generate JSON, with id echoed (""
// for none).
func GenerateEvents(id string) core.Translator { return &generateEvents{id: id} }

// GenerateJob parses a generate body for model/version into a job whose
// payloads take form f.
func (s *Builder) GenerateJob(ctx context.Context, model, version string, body []byte, f core.Form) (*core.Job, error) {
	md, err := s.Metadata(ctx, model, version)
	if err != nil {
		return nil, err
	}
	gr, err := generate.Parse(body, md.GetInputs())
	if err != nil {
		return nil, err
	}
	j := &core.Job{Req: gr.Proto(model, version), Op: core.OpGenerate}
	if f == core.FormBody {
		j.Tr = &generateOne{id: gr.ID}
	} else {
		j.Tr = &generateEvents{id: gr.ID}
	}
	s.CountTokens(ctx, model, version, j, len(body), gr.Inputs, gr.Parameters)
	return j, nil
}

// generateEvents renders every response as one event, into one buffer
// reused for the whole stream.
type generateEvents struct {
	id  string
	buf []byte    // the last event
	out [1][]byte // what next returns: buf
}

func (g *generateEvents) Begin() [][]byte { return nil }

func (g *generateEvents) Next(resp *pb.ModelInferResponse) ([][]byte, error) {
	b, err := generate.AppendResponse(g.buf[:0], resp, g.id)
	if err != nil {
		return nil, err
	}
	g.buf = b
	g.out[0] = b
	return g.out[:], nil
}

func (g *generateEvents) End() ([][]byte, error) { return nil, nil }

// generateOne insists on exactly one response, as Triton's /generate does.
type generateOne struct {
	id   string
	n    int
	body []byte
}

func (g *generateOne) Begin() [][]byte { return nil }

func (g *generateOne) Next(resp *pb.ModelInferResponse) ([][]byte, error) {
	if g.n++; g.n > 1 {
		return nil, core.ErrNotOne
	}
	b, err := generate.Response(resp, g.id)
	g.body = b
	return nil, err
}

func (g *generateOne) End() ([][]byte, error) {
	if g.n != 1 {
		return nil, core.ErrNotOne
	}
	return [][]byte{g.body}, nil
}
