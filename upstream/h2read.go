package upstream

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"golang.org/x/net/http2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// RecvMsg reads frames until one whole message is in m, a *wireMsg, whose
// buffer it reuses (reader only). It returns io.EOF when the target ends
// the stream with OK, and the stream's status otherwise.
func (h *h2Stream) RecvMsg(m any) error {
	w := m.(*wireMsg)
	var hdr [5]byte
	nh, size, have := 0, -1, 0
	for {
		for size < 0 && len(h.rest) > 0 {
			n := copy(hdr[nh:], h.rest)
			nh += n
			h.rest = h.rest[n:]
			if nh < len(hdr) {
				continue
			}
			if hdr[0] != 0 {
				return h.fail(status.Error(codes.Internal, "upstream: compressed message received, none was asked for"))
			}
			n32 := binary.BigEndian.Uint32(hdr[1:])
			if int64(n32) > int64(h.maxRecv) {
				return h.fail(status.Errorf(codes.ResourceExhausted, "received message larger than max (%d vs. %d)", n32, h.maxRecv))
			}
			size = int(n32)
			if cap(w.b) < size {
				w.b = make([]byte, size, bufClass(size))
			}
			w.b = w.b[:size]
		}
		if size >= 0 {
			n := copy(w.b[have:], h.rest)
			have += n
			h.rest = h.rest[n:]
			if have == size {
				return nil
			}
		}
		if err := h.readFrame(nh > 0); err != nil {
			return err
		}
	}
}

// readFrame reads the next frame: DATA leaves its payload in h.rest, the
// others are handled here. inMsg says a message is partly read. An error
// ends the stream: io.EOF for an OK end.
func (h *h2Stream) readFrame(inMsg bool) error {
	f, err := h.fr.ReadFrame()
	if err != nil {
		return h.fail(h.readError(err))
	}
	switch f := f.(type) {
	case *http2.DataFrame:
		if f.StreamID != h2StreamID {
			return h.credit(0, int(f.Length)) // the connection's window still counts it
		}
		if !h.gotHeaders {
			return h.fail(status.Error(codes.Internal, "upstream: DATA before the response headers"))
		}
		if err := h.credit(int(f.Length), int(f.Length)); err != nil {
			return err
		}
		h.rest = f.Data()
		h.heard = true
		if f.StreamEnded() {
			return h.fail(status.Error(codes.Internal, "upstream: server closed the stream without sending trailers"))
		}
	case *http2.MetaHeadersFrame:
		if f.StreamID != h2StreamID {
			return nil
		}
		h.heard = true
		return h.headers(f, inMsg)
	case *http2.SettingsFrame:
		if f.IsAck() {
			return nil
		}
		return h.settings(f)
	case *http2.WindowUpdateFrame:
		h.fmu.Lock()
		overflow := false
		switch f.StreamID {
		case 0:
			h.sendConn += int64(f.Increment)
			overflow = h.sendConn > maxWindow
		case h2StreamID:
			h.sendStream += int64(f.Increment)
			overflow = h.sendStream > maxWindow
		}
		h.cond.Broadcast()
		h.fmu.Unlock()
		if overflow {
			// RFC 9113 6.9.1: a window above 2^31-1 is a flow-control
			// error (the stream's would end only the stream, but the
			// connection carries just this one).
			return h.fail(errFlowControl)
		}
	case *http2.PingFrame:
		if f.IsAck() {
			return nil
		}
		return h.write(func() error { return h.fr.WritePing(true, f.Data) })
	case *http2.RSTStreamFrame:
		if f.StreamID != h2StreamID {
			return nil
		}
		return h.fail(status.Errorf(h2Code(f.ErrCode), "stream terminated by RST_STREAM with error code: %v", f.ErrCode))
	case *http2.GoAwayFrame:
		// A graceful GOAWAY lets the streams it counts run to their end
		// (the connection closes after); ours is refused only when it is
		// not counted.
		h.goAway = fmt.Sprintf("GOAWAY %v %q", f.ErrCode, f.DebugData())
		if f.ErrCode == http2.ErrCodeEnhanceYourCalm && string(f.DebugData()) == "too_many_pings" && h.onPings != nil {
			h.onPings()
		}
		if f.LastStreamID < h2StreamID {
			return h.fail(status.Errorf(codes.Unavailable, "upstream: the server sent %s before the stream started", h.goAway))
		}
		if h.onGoAway != nil {
			h.onGoAway()
			h.onGoAway = nil
		}
	case *http2.PushPromiseFrame:
		return h.fail(status.Error(codes.Internal, "upstream: PUSH_PROMISE, push is disabled"))
	}
	return nil
}

// readError maps a failed read to the stream's status: the context's when
// it ended, connection loss otherwise.
func (h *h2Stream) readError(err error) error {
	if e := h.ended(); e != nil {
		return e
	}
	// A broken connection is Unavailable, as grpc-go has it, so that its
	// target is ejected.
	var ce http2.ConnectionError
	if errors.As(err, &ce) {
		msg := fmt.Sprintf("error reading from server: HTTP/2 %v", err)
		if d := h.fr.ErrorDetail(); d != nil {
			msg += ": " + d.Error()
		}
		return status.Error(codes.Unavailable, msg)
	}
	var se http2.StreamError
	if errors.As(err, &se) {
		return status.Errorf(codes.Internal, "upstream: HTTP/2 stream error: %v", se)
	}
	if errors.Is(err, errKeepalive) {
		return status.Errorf(codes.Unavailable, "upstream: %v", err)
	}
	if errors.Is(err, http2.ErrFrameTooLarge) {
		return status.Error(codes.Unavailable, "error reading from server: HTTP/2 frame larger than the advertised maximum")
	}
	if h.goAway != "" {
		return status.Errorf(codes.Unavailable, "error reading from server: %v, after %s", err, h.goAway)
	}
	return status.Errorf(codes.Unavailable, "error reading from server: %v", err)
}

// credit accounts received bytes, str of them on the stream and con on the
// connection, and gives them back to the peer in batches of half a window.
func (h *h2Stream) credit(str, con int) error {
	if con == 0 {
		return nil
	}
	h.unackedStr += str
	h.unackedCon += con
	if h.unackedStr < streamWindow/2 && h.unackedCon < connWindow/2 {
		return nil
	}
	str, con = h.unackedStr, h.unackedCon
	if str < streamWindow/2 {
		str = 0
	}
	if con < connWindow/2 {
		con = 0
	}
	err := h.write(func() error {
		if str > 0 {
			if err := h.fr.WriteWindowUpdate(h2StreamID, uint32(str)); err != nil {
				return err
			}
		}
		if con > 0 {
			return h.fr.WriteWindowUpdate(0, uint32(con))
		}
		return nil
	})
	if str > 0 {
		h.unackedStr = 0
	}
	if con > 0 {
		h.unackedCon = 0
	}
	return err
}

// settings applies the peer's SETTINGS and acknowledges them.
func (h *h2Stream) settings(f *http2.SettingsFrame) error {
	h.fmu.Lock()
	err := f.ForeachSetting(func(s http2.Setting) error {
		if err := s.Valid(); err != nil {
			return err
		}
		switch s.ID {
		case http2.SettingInitialWindowSize:
			h.sendStream += int64(s.Val) - h.peerWindow
			h.peerWindow = int64(s.Val)
		case http2.SettingMaxFrameSize:
			h.peerFrame = int(s.Val)
		}
		return nil
	})
	h.cond.Broadcast()
	h.fmu.Unlock()
	if err != nil {
		return h.fail(status.Errorf(codes.Unavailable, "connection error: bad SETTINGS: %v", err))
	}
	return h.write(h.fr.WriteSettingsAck)
}

// headers handles response headers and trailers. Trailers (or headers
// with END_STREAM: a trailers-only response) end the stream with their
// grpc-status.
func (h *h2Stream) headers(f *http2.MetaHeadersFrame, inMsg bool) error {
	first := !h.gotHeaders
	var grpcStatus, grpcMessage, contentType string
	hasStatus := false
	for _, hf := range f.RegularFields() {
		switch hf.Name {
		case "grpc-status":
			grpcStatus, hasStatus = hf.Value, true
		case "grpc-message":
			grpcMessage = decodeGRPCMessage(hf.Value)
		case "content-type":
			contentType = hf.Value
		}
	}
	if first {
		st := f.PseudoValue("status")
		if len(st) == 3 && st[0] == '1' && !f.StreamEnded() {
			return nil // an interim response (100 Continue): the real one follows
		}
		h.gotHeaders = true
		if st != "200" {
			code, _ := strconv.Atoi(st)
			if !hasStatus {
				return h.fail(status.Errorf(httpCode(code), "unexpected HTTP status code received from server: %s", st))
			}
		}
		if !hasStatus && !strings.HasPrefix(contentType, "application/grpc") {
			return h.fail(status.Errorf(codes.Unknown, "unexpected content-type %q from server", contentType))
		}
	}
	if !f.StreamEnded() {
		if !first {
			return h.fail(status.Error(codes.Internal, "upstream: trailers without END_STREAM"))
		}
		return nil
	}
	if !hasStatus {
		return h.fail(status.Error(codes.Unknown, "upstream: server closed the stream without grpc-status"))
	}
	n, err := strconv.ParseUint(grpcStatus, 10, 32)
	if err != nil {
		return h.fail(status.Errorf(codes.Internal, "upstream: malformed grpc-status %q", grpcStatus))
	}
	code := codes.Code(n)
	if code == codes.OK {
		if inMsg || len(h.rest) > 0 {
			return h.fail(status.Error(codes.Internal, "upstream: stream ended inside a message"))
		}
		return h.fail(io.EOF)
	}
	return h.fail(status.Error(code, grpcMessage))
}
