package upstream

import (
	"encoding/binary"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/streamgate/streamgate/proto/inferencepb"
)

// Send sends req as one gRPC message (sender only).
func (h *h2Stream) Send(req *pb.ModelInferRequest) error {
	// The 5-byte gRPC prefix (not compressed, length), then the message.
	b, err := proto.MarshalOptions{}.MarshalAppend(append(h.sbuf[:0], 0, 0, 0, 0, 0), req)
	if err != nil {
		return h.fail(status.Errorf(codes.Internal, "upstream: marshal request: %v", err))
	}
	h.sbuf = b
	if n := len(b) - 5; n > h.maxSend {
		return h.fail(status.Errorf(codes.ResourceExhausted, "trying to send message larger than max (%d vs. %d)", n, h.maxSend))
	}
	binary.BigEndian.PutUint32(b[1:5], uint32(len(b)-5))
	for len(b) > 0 {
		n, err := h.reserve(len(b))
		if err != nil {
			return err
		}
		h.lockWrite()
		err = h.fr.WriteData(h2StreamID, false, b[:n])
		if err == nil && n == len(b) {
			err = h.bw.Flush()
		}
		h.wmu.Unlock()
		if err != nil {
			return h.writeError(err)
		}
		b = b[n:]
	}
	return nil
}

// reserve takes send credit for up to want bytes, one DATA frame's worth,
// waiting for WINDOW_UPDATEs when there is none (having flushed what is
// buffered, so that the peer can see it and give credit).
func (h *h2Stream) reserve(want int) (int, error) {
	h.fmu.Lock()
	defer h.fmu.Unlock()
	flushed := false
	for {
		if h.err != nil {
			return 0, h.err
		}
		if w := min(h.sendStream, h.sendConn); w > 0 {
			n := min(want, int(w), h.peerFrame)
			h.sendStream -= int64(n)
			h.sendConn -= int64(n)
			return n, nil
		}
		if !flushed {
			flushed = true
			h.fmu.Unlock()
			h.lockWrite()
			err := h.bw.Flush()
			h.wmu.Unlock()
			h.fmu.Lock()
			if err != nil {
				h.fmu.Unlock()
				err = h.writeError(err)
				h.fmu.Lock()
				return 0, err
			}
			continue
		}
		h.cond.Wait()
	}
}

// CloseSend half-closes the stream (sender only).
func (h *h2Stream) CloseSend() error {
	return h.write(func() error { return h.fr.WriteData(h2StreamID, true, nil) })
}
