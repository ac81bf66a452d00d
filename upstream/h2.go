package upstream

import (
	"bufio"
	"crypto/tls"
	"io"
	"net"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
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
	// beforeRead, if set (OnRead), is called before every read of
	// the connection: what the last read brought has been handled.
	beforeRead func()

	sbuf []byte // the sender's marshalling buffer
}

var _ readBatcher = (*h2Stream)(nil)

// OnRead has f called on the reader's goroutine before every read of the
// connection, once the messages the last read brought are all returned
// (reader only, before its first RecvMsg).
func (h *h2Stream) OnRead(f func()) { h.beforeRead = f }

// readNotifier is the connection as the framer's buffer reads it: each
// read first tells h.beforeRead.
type readNotifier struct {
	r io.Reader
	h *h2Stream
}

func (r readNotifier) Read(p []byte) (int, error) {
	if f := r.h.beforeRead; f != nil {
		f()
	}
	return r.r.Read(p)
}

// h2Options are what dialH2 needs of a target.
type h2Options struct {
	addr      string      // the target to dial (see parseAddress)
	authority string      // the :authority sent; "": addr's (see targetAuthority)
	tls       *tls.Config // nil: plaintext (h2c); NextProtos must hold "h2"
	maxRecv   int         // Options.MaxMessageBytes
	maxSend   int
	dialTime  time.Duration
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
