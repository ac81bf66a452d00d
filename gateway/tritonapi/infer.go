package tritonapi

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"io"
	"net/http"
	"slices"
	"strconv"

	"github.com/streamgate/streamgate/gateway/core"
	"github.com/streamgate/streamgate/gateway/tritonhttp"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
)

// Triton's HTTP/REST inference protocol beside the generate extension:
// /infer (KServe v2 with the binary tensor data extension, over the same
// lifecycle as every route), and the model config, statistics and
// repository index routes, relayed from upstream. The wire format is
// package tritonhttp's.

var errDecoupledHTTP = &core.HTTPError{Status: http.StatusNotImplemented, Code: "unimplemented",
	Msg: "HTTP end point doesn't support models with decoupled transaction policy"}

// Infer answers one /infer request with one body, as Triton does: the
// model must not be decoupled (Triton checks that first, so an unknown
// model is 404 before the body is read), the body is gzip, deflate or
// plain, and the answer is JSON, or JSON and binary tensor data.
func (s *API) Infer(w http.ResponseWriter, r *http.Request) error {
	model, version := modelParams(r)
	cfg, err := s.ModelConfig(r.Context(), model, version)
	if err != nil {
		return err
	}
	if cfg.GetModelTransactionPolicy().GetDecoupled() {
		return errDecoupledHTTP
	}
	body, err := s.readInferBody(w, r)
	if err != nil {
		return err
	}
	hv := r.Header.Values(tritonhttp.HeaderLength)
	n, err := tritonhttp.ParseHeaderLength(r.Header.Get(tritonhttp.HeaderLength), len(hv) > 0, len(body))
	if err != nil {
		return err
	}
	req, err := tritonhttp.Parse(body, n, model, cfg)
	if err != nil {
		return err
	}
	a := &inferAnswer{req: req}
	j := &core.Job{Req: req.Proto(model, version), Tr: a}
	s.CountTokens(r.Context(), model, version, j, len(body), req.Inputs, j.Req.GetParameters())
	return s.Serve(r.Context(), r.RemoteAddr, j, &core.BodySink{W: w, Header: a.header})
}

// readInferBody reads a body in any Content-Encoding Triton's /infer
// takes (identity, gzip, deflate), at most Options.MaxBodyBytes before and
// after decompression, within readBody's deadline; any other encoding is
// 501 with Accept-Encoding, as in Triton.
func (s *API) readInferBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	max := s.Opts.MaxBodyBytes
	enc := r.Header.Get("Content-Encoding")
	switch enc {
	case "", "identity":
		return s.ReadBody(w, r)
	case "gzip", "deflate":
	default: // as Triton answers it
		w.Header().Set("Accept-Encoding", "gzip, deflate")
		return nil, &core.HTTPError{Status: http.StatusNotImplemented, Code: "unimplemented", Msg: "Unsupported compression type"}
	}
	raw, err := s.ReadRaw(w, r)
	if err != nil {
		return nil, err
	}
	var zr io.Reader
	if enc == "gzip" {
		zr, err = gzip.NewReader(bytes.NewReader(raw))
	} else {
		zr, err = zlib.NewReader(bytes.NewReader(raw))
	}
	var b []byte
	if err == nil {
		b, err = io.ReadAll(io.LimitReader(zr, max+1))
	}
	switch {
	case err != nil:
		return nil, &core.HTTPError{Status: http.StatusBadRequest, Code: "bad_request", Msg: "unable to decompress the " + enc + " request body: " + err.Error()}
	case int64(len(b)) > max:
		return nil, &http.MaxBytesError{Limit: max}
	}
	return b, nil
}

// inferAnswer is the translator of /infer: exactly one response, rendered
// as the body, as Triton's InferResponseComplete insists.
type inferAnswer struct {
	req       *tritonhttp.Request
	n         int
	body      []byte
	headerLen int // of the JSON part when binary data follows, else -1
}

func (a *inferAnswer) Begin() [][]byte { return nil }

func (a *inferAnswer) Next(resp *pb.ModelInferResponse) ([][]byte, error) {
	if a.n++; a.n > 1 {
		return nil, errNotSingle(a.n)
	}
	body, n, err := a.req.AppendResponse(a.body[:0], resp)
	a.body, a.headerLen = body, n
	return nil, err
}

func (a *inferAnswer) End() ([][]byte, error) {
	if a.n != 1 {
		return nil, errNotSingle(a.n)
	}
	return [][]byte{a.body}, nil
}

// Header sets the answer's Content-Type, and the binary extension's
// header when binary data follows the JSON.
func (a *inferAnswer) header(h http.Header) {
	if a.headerLen < 0 {
		h.Set("Content-Type", "application/json")
		return
	}
	h.Set("Content-Type", "application/octet-stream")
	h.Set(tritonhttp.HeaderLength, strconv.Itoa(a.headerLen))
}

func errNotSingle(n int) error {
	return &core.HTTPError{Status: http.StatusInternalServerError, Code: "internal",
		Msg: "expected a single response, got " + strconv.Itoa(n)}
}

// ModelConfigJSON is GET .../config: the model's config as Triton prints
// it.
func (s *API) ModelConfigJSON(w http.ResponseWriter, r *http.Request) error {
	model, version := modelParams(r)
	if err := core.TritonModelAllowed(r.Context(), model); err != nil {
		return err
	}
	cfg, err := s.ModelConfig(r.Context(), model, version)
	if err != nil {
		return err
	}
	core.WriteJSON(w, http.StatusOK, tritonhttp.ModelConfig(cfg))
	return nil
}

// ModelStats is GET /v2/models/stats (every model the key may use) and
// .../stats.
func (s *API) ModelStats(w http.ResponseWriter, r *http.Request) error {
	model, version := modelParams(r)
	if model != "" && core.TritonModelAllowed(r.Context(), model) != nil {
		// As the statistics of a model upstream does not have.
		return &core.HTTPError{Status: http.StatusBadRequest, Code: "invalid_argument",
			Msg: "requested model '" + model + "' is not available"}
	}
	st, err := s.Inspect.ModelStatistics(r.Context(), model, version)
	if err != nil {
		return s.NotFound(r.Context(), model, err)
	}
	if !core.AllowsAll(r.Context()) {
		st = &pb.ModelStatisticsResponse{ModelStats: slices.DeleteFunc(slices.Clone(st.GetModelStats()),
			func(m *pb.ModelStatistics) bool { return core.TritonModelAllowed(r.Context(), m.GetName()) != nil })}
	}
	core.WriteJSON(w, http.StatusOK, tritonhttp.Statistics(st))
	return nil
}

// RepositoryIndex is POST /v2/repository/index: every model upstream
// knows, or with {"ready":true} the ready ones.
func (s *API) RepositoryIndex(w http.ResponseWriter, r *http.Request) error {
	body, err := s.ReadBody(w, r)
	if err != nil {
		return err
	}
	ready, err := tritonhttp.ParseIndexRequest(body)
	if err != nil {
		return err
	}
	models, err := s.Inspect.RepositoryIndex(r.Context())
	if err != nil {
		return err
	}
	if !core.AllowsAll(r.Context()) {
		models = slices.DeleteFunc(slices.Clone(models),
			func(m *pb.RepositoryIndexResponse_ModelIndex) bool {
				return core.TritonModelAllowed(r.Context(), m.GetName()) != nil
			})
	}
	core.WriteJSON(w, http.StatusOK, tritonhttp.RepositoryIndex(models, ready))
	return nil
}
