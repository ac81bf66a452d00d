package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/streamgate/streamgate/engine"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// direct is the baseline: a plain gRPC client speaking Triton's
// ModelStreamInfer to the engine, over one HTTP/2 connection.
//
// With streams == 0 (the default) every request gets a ModelStreamInfer
// RPC of its own, half-closed after the request, the way a Triton client
// usually streams; leaving cancels the RPC. With streams > 0 requests are
// spread round-robin over that many long-lived shared streams, routed back
// by id, and leaving sends streamgate's in-band cancel message.
type direct struct {
	conn   *grpc.ClientConn
	client pb.GRPCInferenceServiceClient
	wl     workload

	ctx    context.Context // bounds the shared streams
	cancel context.CancelFunc
	next   atomic.Uint64
	mu     sync.Mutex
	shared []*sharedStream
}

func newDirect(addr string, wl workload, streams int) (*direct, error) {
	conn, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(math.MaxInt32), grpc.MaxCallSendMsgSize(math.MaxInt32)))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &direct{
		conn:   conn,
		client: pb.NewGRPCInferenceServiceClient(conn),
		wl:     wl,
		ctx:    ctx,
		cancel: cancel,
		shared: make([]*sharedStream, streams),
	}, nil
}

func (d *direct) close() {
	d.cancel()
	d.mu.Lock()
	for _, s := range d.shared {
		if s != nil {
			<-s.dead
		}
	}
	d.mu.Unlock()
	d.conn.Close()
}

func (d *direct) do(ctx context.Context, serial int32, s *stream) error {
	if len(d.shared) > 0 {
		return d.doShared(ctx, serial, s)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req := d.wl.grpcRequest(serial)
	s.begin()
	st, err := d.client.ModelStreamInfer(ctx)
	if err != nil {
		return err
	}
	if err := st.Send(req); err != nil {
		return err
	}
	if err := st.CloseSend(); err != nil {
		return err
	}
	final := false
	for {
		m, err := st.Recv()
		if err == io.EOF {
			if !final {
				return errKindf("protocol", "stream ended before the final response")
			}
			return nil
		}
		if err != nil {
			return err
		}
		done, err := d.handle(m, s)
		if err != nil {
			return err
		}
		if !s.left.IsZero() {
			cancel() // leave: cancel the RPC
			return errClientCancel
		}
		final = final || done
	}
}

// handle accounts one stream message; it reports whether it was the
// request's final response.
func (d *direct) handle(m *pb.ModelStreamInferResponse, s *stream) (bool, error) {
	if m.GetErrorMessage() != "" {
		return true, errKindf("model_error", "%s", m.GetErrorMessage())
	}
	r := m.GetInferResponse()
	if hasContent(r, d.wl.textModel()) {
		s.response()
	}
	return engine.FinalFlag(r), nil
}

// hasContent reports whether a response carries what the bench counts as
// a response: any output of repeat, a non-empty text_output of a text
// model (the final response of a text model often carries only the finish
// reason and counts).
func hasContent(r *pb.ModelInferResponse, text bool) bool {
	if len(r.GetOutputs()) == 0 {
		return false
	}
	if !text {
		return true
	}
	for i, o := range r.GetOutputs() {
		if o.GetName() != "text_output" {
			continue
		}
		if i < len(r.GetRawOutputContents()) {
			raw := r.GetRawOutputContents()[i]
			// BYTES layout: 4-byte little-endian length, then the bytes.
			return len(raw) > 4 || len(raw) == 4 && binary.LittleEndian.Uint32(raw) > 0
		}
		for _, b := range o.GetContents().GetBytesContents() {
			if len(b) > 0 {
				return true
			}
		}
	}
	return false
}

// sharedStream is one long-lived ModelStreamInfer RPC carrying many
// requests. Its reader goroutine routes responses by id; it exits when the
// RPC ends, closing dead.
type sharedStream struct {
	st     pb.GRPCInferenceService_ModelStreamInferClient
	sendMu sync.Mutex
	mu     sync.Mutex
	calls  map[string]*sharedCall
	dead   chan struct{}
	err    error // set before dead is closed
}

type sharedCall struct {
	ch   chan *pb.ModelStreamInferResponse
	gone chan struct{} // closed when the caller stops listening
}

// stream returns shared stream i, opening a new one when it is missing or
// broken.
func (d *direct) stream(i int) (*sharedStream, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if s := d.shared[i]; s != nil {
		select {
		case <-s.dead:
		default:
			return s, nil
		}
	}
	st, err := d.client.ModelStreamInfer(d.ctx)
	if err != nil {
		return nil, err
	}
	s := &sharedStream{st: st, calls: map[string]*sharedCall{}, dead: make(chan struct{})}
	go s.read() // ends with the RPC; close waits on dead
	d.shared[i] = s
	return s, nil
}

func (s *sharedStream) read() {
	defer close(s.dead)
	for {
		m, err := s.st.Recv()
		if err != nil {
			s.err = err
			return
		}
		s.mu.Lock()
		c := s.calls[m.GetInferResponse().GetId()]
		s.mu.Unlock()
		if c == nil {
			continue // a request the bench already left
		}
		select {
		case c.ch <- m:
		case <-c.gone:
		}
	}
}

func (s *sharedStream) send(req *pb.ModelInferRequest) error {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	return s.st.Send(req)
}

func (d *direct) doShared(ctx context.Context, serial int32, s *stream) error {
	ss, err := d.stream(int(d.next.Add(1) % uint64(len(d.shared))))
	if err != nil {
		return err
	}
	req := d.wl.grpcRequest(serial)
	c := &sharedCall{ch: make(chan *pb.ModelStreamInferResponse, 64), gone: make(chan struct{})}
	ss.mu.Lock()
	ss.calls[req.Id] = c
	ss.mu.Unlock()
	defer func() {
		ss.mu.Lock()
		delete(ss.calls, req.Id)
		ss.mu.Unlock()
		close(c.gone)
	}()
	s.begin()
	if err := ss.send(req); err != nil {
		return err
	}
	leave := func() error {
		ss.send(&pb.ModelInferRequest{Id: req.Id, ModelName: req.ModelName, Parameters: map[string]*pb.InferParameter{
			engine.ParamCancel: {ParameterChoice: &pb.InferParameter_BoolParam{BoolParam: true}},
		}})
		return errClientCancel
	}
	for {
		select {
		case m := <-c.ch:
			final, err := d.handle(m, s)
			if err != nil {
				return err
			}
			if !s.left.IsZero() {
				return leave()
			}
			if final {
				return nil
			}
		case <-ss.dead:
			if ss.err != nil && !errors.Is(ss.err, io.EOF) {
				return ss.err
			}
			return errKindf("protocol", "shared stream ended")
		case <-ctx.Done():
			leave()
			return ctx.Err()
		}
	}
}

// grpcID is the request id the direct transport gives request serial.
func grpcID(serial int32) string { return "b" + strconv.FormatInt(int64(serial), 10) }
