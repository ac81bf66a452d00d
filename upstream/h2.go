package upstream

import (
	"bufio"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/streamgate/streamgate/proto/inferencepb"
)

// Transports of ModelStreamInfer streams (Options.Transport).
const (
	// TransportGRPC carries every stream on the target's grpc-go
	// connection, multiplexed with its health checks and metadata calls.
	TransportGRPC = "grpc"
	// TransportH2 (the default) gives every pooled stream an HTTP/2
	// connection of its own, spoken by h2Stream: the stream's reader reads
	// the frames itself, with no demultiplexing goroutine and no
	// allocation per message. Health checks, unary calls and dedicated
	// streams stay on grpc-go.
	TransportH2 = "h2"
)

// modelStreamInferPath is the HTTP/2 :path of ModelStreamInfer.
const modelStreamInferPath = "/inference.GRPCInferenceService/ModelStreamInfer"

// h2StreamID is the id of the one stream on an h2Stream's connection.
const h2StreamID = 1

// h2Stream is one ModelStreamInfer RPC spoken over an HTTP/2 connection of
// its own. It implements streamRPC: the stream's sender calls Send and
// CloseSend, its reader RecvMsg, which reads every frame of the
// connection and handles the control frames inline. Both write frames
// through bw under wmu. The context's end closes the connection, which
// unblocks both.
type h2Stream struct {
	conn    net.Conn
	fr      *http2.Framer
	stop    func() bool // stops the context.AfterFunc that fails h
	maxRecv int
	maxSend int

	wmu sync.Mutex // guards bw and the framer's writes (lockWrite)
	bw  *bufio.Writer
	// writeTimeout bounds every write: keepalive plus its timeout, or
	// h2WriteTimeout without keepalive.
	writeTimeout time.Duration

	// Send flow control and the end of the stream, under fmu.
	fmu        sync.Mutex
	cond       *sync.Cond // signalled when credit arrives or the stream fails
	sendStream int64      // send window of the stream
	sendConn   int64      // send window of the connection
	peerWindow int64      // the peer's SETTINGS_INITIAL_WINDOW_SIZE
	peerFrame  int        // the peer's SETTINGS_MAX_FRAME_SIZE
	err        error      // the stream's end; set once

	// The reader's state.
	rest       []byte // what is left of the last DATA frame read
	gotHeaders bool   // response headers arrived
	heard      bool   // DATA or HEADERS arrived since the last keepalive ping
	goAway     string // the server's GOAWAY, its code and debug data
	onPings    func() // h2Options.tooManyPings
	onGoAway   func() // h2Options.goingAway; nil once called
	unackedStr int    // bytes received and not yet credited back
	unackedCon int

	sbuf []byte // the sender's marshalling buffer
}

var _ streamRPC = (*h2Stream)(nil)

// h2Options are what dialH2 needs of a target.
type h2Options struct {
	addr     string      // host:port to dial, also the :authority
	tls      *tls.Config // nil: plaintext (h2c); NextProtos must hold "h2"
	maxRecv  int         // Options.MaxMessageBytes
	maxSend  int
	dialTime time.Duration
	// keepalive pings a connection that read nothing for keepalive while
	// busy reports calls on its stream, and fails the stream when
	// kaTimeout passes with no answer; zero: never. pingGap is the least
	// time between two pings with no DATA or HEADERS from the peer in
	// between (see kaReader).
	keepalive, kaTimeout, pingGap time.Duration
	// tooManyPings, if set, is called when the server closes the
	// connection with GOAWAY "too_many_pings" (reader only).
	tooManyPings func()
	// goingAway, if set, is called once when the server sends a GOAWAY
	// that lets the stream run on (graceful: a connection age, a server
	// stopping): the pool stops placing requests on it at once, so it
	// ends with its last request rather than when the server's grace
	// runs out (reader only).
	goingAway func()
}

// maxWindow is the largest flow-control window HTTP/2 allows.
const maxWindow = 1<<31 - 1

// h2WriteTimeout bounds a write on a connection without keepalive: a peer
// that takes nothing for that long, while we have something to say, is
// gone (keepalive's default bound, 10 s plus 5 s, with room to spare).
const h2WriteTimeout = 30 * time.Second

// tritonPingGap is pingGap for any target: grpc core (Triton) counts a
// strike for every ping that comes within 5 minutes of the last one while
// it sent no data, and closes the connection with GOAWAY "too_many_pings"
// after two; a few seconds more absorb the network's jitter.
const tritonPingGap = 5*time.Minute + 5*time.Second

// Close ends the stream and its connection (the sender's last word, once
// the reader is done).
func (h *h2Stream) Close() error {
	h.stop()
	h.fail(status.Error(codes.Canceled, "upstream: stream closed"))
	return nil
}

// fail ends the stream with err unless it ended already, closing the
// connection; it returns the stream's end. The peer is told first, when
// no write is stuck: a stream we cancel gets RST_STREAM CANCEL, and the
// connection a GOAWAY (NO_ERROR, or FLOW_CONTROL_ERROR for the peer's
// overflowed window), so that it sees the end at
// once rather than a dropped connection.
func (h *h2Stream) fail(err error) error {
	h.fmu.Lock()
	first := h.err == nil
	if first {
		h.err = err
		h.cond.Broadcast()
	}
	err = h.err
	h.fmu.Unlock()
	if first {
		h.sayGoodbye(err)
		h.conn.Close()
	}
	return err
}

// errFlowControl ends a connection whose peer overflowed a flow-control
// window; fail says so in its GOAWAY.
var errFlowControl = status.Error(codes.Internal, "connection error: FLOW_CONTROL_ERROR: the server's WINDOW_UPDATE overflows the window")

// sayGoodbye writes, best effort and within a second, RST_STREAM CANCEL when
// we cancel the stream, then GOAWAY with the code err calls for. It skips
// both while another write holds the connection (stuck, or failing).
func (h *h2Stream) sayGoodbye(err error) {
	if h.fr == nil || !h.wmu.TryLock() {
		return
	}
	defer h.wmu.Unlock()
	h.conn.SetWriteDeadline(time.Now().Add(time.Second))
	code := http2.ErrCodeNo
	switch {
	case err == errFlowControl:
		code = http2.ErrCodeFlowControl
	case status.Code(err) == codes.Canceled || status.Code(err) == codes.DeadlineExceeded:
		if h.fr.WriteRSTStream(h2StreamID, http2.ErrCodeCancel) != nil {
			return
		}
	}
	if h.fr.WriteGoAway(h2StreamID, code, nil) == nil {
		h.bw.Flush()
	}
}

// ended returns the stream's end, nil while it lasts.
func (h *h2Stream) ended() error {
	h.fmu.Lock()
	defer h.fmu.Unlock()
	return h.err
}

// writeError ends the stream for a failed write.
func (h *h2Stream) writeError(err error) error {
	if e := h.ended(); e != nil {
		return e
	}
	return h.fail(status.Errorf(codes.Unavailable, "connection error: write: %v", err))
}

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

var errKeepalive = errors.New("keepalive ping not acknowledged within timeout")

// kaReader reads the connection for the framer, and keeps it alive: the
// connection's read deadline is time after the last check; when it
// passes with nothing read meanwhile while the stream is busy, kaReader
// pings the peer and waits timeout more for anything to arrive. The
// deadline moves only when it passes, so reading costs nothing more.
// TLS connections survive a read timeout too.
//
// A peer that sent no DATA or HEADERS since the last ping is pinged again
// only gap after it: a busy stream on which a target stays silent (a long
// time to first token) must not collect grpc core's ping strikes. Its
// silence is the idle timeout's business; the first ping has shown the
// connection alive.
type kaReader struct {
	h                  *h2Stream
	time, timeout, gap time.Duration
	busy               func() bool
	armed              bool // false while dialH2 reads the server's preface
	read, pinged       bool
	lastPing           time.Time
}

func (r *kaReader) Read(p []byte) (int, error) {
	for {
		n, err := r.h.conn.Read(p)
		if n > 0 {
			r.read = true
		}
		if err == nil || !r.armed || !errors.Is(err, os.ErrDeadlineExceeded) {
			return n, err
		}
		if n > 0 {
			return n, nil
		}
		now := time.Now()
		switch {
		case r.read || !r.busy():
			r.read, r.pinged = false, false
			r.h.conn.SetReadDeadline(now.Add(r.time))
		case !r.pinged:
			if next := r.lastPing.Add(r.gap); !r.h.heard && now.Before(next) {
				r.h.conn.SetReadDeadline(next)
				continue
			}
			r.pinged, r.lastPing, r.h.heard = true, now, false
			if err := r.h.write(func() error { return r.h.fr.WritePing(false, [8]byte{'k', 'e', 'e', 'p'}) }); err != nil {
				return 0, err
			}
			r.h.conn.SetReadDeadline(now.Add(r.timeout))
		default:
			return 0, errKeepalive
		}
	}
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

// lockWrite takes the write lock and gives the writes under it
// writeTimeout: a write stuck that long, the peer having stopped reading,
// fails the connection, so that nobody waits for the lock on a dead peer
// (the reader's keepalive pings, window updates and acknowledgements
// included).
func (h *h2Stream) lockWrite() {
	h.wmu.Lock()
	if h.writeTimeout > 0 {
		h.conn.SetWriteDeadline(time.Now().Add(h.writeTimeout))
	}
}

// write runs fn, which writes frames, under wmu and flushes.
func (h *h2Stream) write(fn func() error) error {
	h.lockWrite()
	err := fn()
	if err == nil {
		err = h.bw.Flush()
	}
	h.wmu.Unlock()
	if err != nil {
		return h.writeError(err)
	}
	return nil
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
