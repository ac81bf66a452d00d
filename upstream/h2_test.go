package upstream

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/streamgate/streamgate/proto/inferencepb"
)

// The tests of h2Stream below talk to a raw HTTP/2 server on a loopback
// port that plays a script frame by frame (x/net/http2's Framer on the
// real wire), for the frames the engine does not send in the suite.

// rawH2 is the server side of one connection of a test.
type rawH2 struct {
	t    *testing.T
	conn net.Conn
	fr   *http2.Framer
	req  []hpack.HeaderField // the request's headers
}

// serveOnce accepts one connection on a loopback port and runs handle on
// it, closing it after. The test waits for it at its end.
func serveOnce(t *testing.T, handle func(net.Conn)) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		conn, err := lis.Accept()
		lis.Close()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		handle(conn)
	}()
	t.Cleanup(func() {
		lis.Close()
		<-done
	})
	return lis.Addr().String()
}

// serveRawH2 accepts one connection on a loopback port, reads the client's
// preface and request HEADERS, having sent settings, and plays script on
// it, then reads until the client hangs up. The test waits for it at its
// end.
func serveRawH2(t *testing.T, settings []http2.Setting, script func(s *rawH2)) string {
	t.Helper()
	return serveOnce(t, func(conn net.Conn) {
		s := &rawH2{t: t, conn: conn, fr: http2.NewFramer(conn, conn)}
		s.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
		preface := make([]byte, len(http2.ClientPreface))
		_, err := io.ReadFull(conn, preface)
		s.check(err)
		if string(preface) != http2.ClientPreface {
			s.failf("preface %q", preface)
		}
		s.check(s.fr.WriteSettings(settings...))
		f := s.read()
		h, ok := f.(*http2.MetaHeadersFrame)
		if !ok || h.StreamID != h2StreamID {
			s.failf("first frame %v, want the request's HEADERS on stream 1", f)
		}
		s.req = h.Fields
		script(s)
		// Read on until the client hangs up: closing with its frames
		// unread would reset the connection under what was sent.
		for {
			if _, err := s.fr.ReadFrame(); err != nil {
				return
			}
		}
	})
}

func (s *rawH2) failf(format string, args ...any) {
	s.t.Errorf("server: "+format, args...)
	runtime.Goexit()
}

func (s *rawH2) check(err error) {
	if err != nil {
		s.failf("%v", err)
	}
}

// read returns the next frame, acknowledging SETTINGS and skipping them
// and WINDOW_UPDATEs.
func (s *rawH2) read() http2.Frame {
	for {
		f, err := s.fr.ReadFrame()
		s.check(err)
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				s.check(s.fr.WriteSettingsAck())
			}
			continue
		case *http2.WindowUpdateFrame:
			continue
		}
		return f
	}
}

// header returns the request header k.
func (s *rawH2) header(k string) string {
	for _, f := range s.req {
		if f.Name == k {
			return f.Value
		}
	}
	return ""
}

// headers writes a header block: fields are name, value pairs.
func (s *rawH2) headers(end bool, fields ...string) {
	var b bytes.Buffer
	enc := hpack.NewEncoder(&b)
	for i := 0; i < len(fields); i += 2 {
		enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	s.check(s.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: h2StreamID, BlockFragment: b.Bytes(), EndHeaders: true, EndStream: end}))
}

func (s *rawH2) respond() { s.headers(false, ":status", "200", "content-type", "application/grpc") }

func (s *rawH2) trailers(code codes.Code, msg string) {
	s.headers(true, "grpc-status", string(rune('0'+code)), "grpc-message", msg)
}

// data writes one DATA frame of b.
func (s *rawH2) data(b []byte) { s.check(s.fr.WriteData(h2StreamID, false, b)) }

// grpcMsg is b with its 5-byte gRPC prefix.
func grpcMsg(b []byte) []byte {
	out := make([]byte, 5, 5+len(b))
	binary.BigEndian.PutUint32(out[1:], uint32(len(b)))
	return append(out, b...)
}

// dialTest opens an h2Stream to addr, closed when the test ends.
func dialTest(t *testing.T, ctx context.Context, addr string, maxRecv int) *h2Stream {
	t.Helper()
	return dialTestOpts(t, ctx, h2Options{addr: addr, maxRecv: maxRecv})
}

// dialTestOpts is dialTest with options; maxSend and dialTime have
// defaults.
func dialTestOpts(t *testing.T, ctx context.Context, o h2Options) *h2Stream {
	t.Helper()
	if o.maxSend == 0 {
		o.maxSend = 1 << 30
	}
	if o.dialTime == 0 {
		o.dialTime = 10 * time.Second
	}
	h, err := dialH2(ctx, o, func() bool { return true })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// wantMessage reads the next message of h and fails unless it is want.
func wantMessage(t *testing.T, h *h2Stream, want string) {
	t.Helper()
	var m wireMsg
	if err := h.RecvMsg(&m); err != nil || string(m.b) != want {
		t.Fatalf("message %q, %v; want %q", m.b, err, want)
	}
}

// wantStatus fails unless err is a status error with code and, if not
// empty, a message containing msg.
func wantStatus(t *testing.T, err error, code codes.Code, msg string) {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok || st.Code() != code || !strings.Contains(st.Message(), msg) {
		t.Fatalf("err = %v, want %v containing %q", err, code, msg)
	}
}

// TestH2Messages: the request goes out with its headers and metadata;
// messages arrive whole whatever the DATA frames' boundaries (two in one
// frame, one split across three with its prefix split, an empty one);
// trailers with OK end the stream with io.EOF.
func TestH2Messages(t *testing.T) {
	req := repeatN(7, 3, 0)
	req.Id = "r1"
	want := []string{"first", "second", strings.Repeat("third", 100), ""}
	addr := serveRawH2(t, nil, func(s *rawH2) {
		for k, v := range map[string]string{":method": "POST", ":scheme": "http", ":path": modelStreamInferPath,
			"content-type": "application/grpc", "te": "trailers", "traceparent": "00-abc-def-01"} {
			if got := s.header(k); got != v {
				s.failf("request header %s = %q, want %q", k, got, v)
			}
		}
		var got []byte
		for {
			f, ok := s.read().(*http2.DataFrame)
			if !ok {
				s.failf("want DATA")
			}
			got = append(got, f.Data()...)
			if f.StreamEnded() {
				break
			}
		}
		var r pb.ModelInferRequest
		if len(got) < 5 || proto.Unmarshal(got[5:], &r) != nil || !proto.Equal(&r, req) {
			s.failf("request %x is not the one sent", got)
		}
		s.respond()
		s.data(append(grpcMsg([]byte(want[0])), grpcMsg([]byte(want[1]))...))
		third := grpcMsg([]byte(want[2]))
		s.data(third[:3])
		s.data(third[3:15])
		s.data(third[15:])
		s.data(grpcMsg(nil))
		s.trailers(codes.OK, "")
	})
	ctx := metadata.AppendToOutgoingContext(t.Context(), "traceparent", "00-abc-def-01")
	h := dialTest(t, ctx, addr, 1<<20)
	if err := h.Send(req); err != nil {
		t.Fatal(err)
	}
	if err := h.CloseSend(); err != nil {
		t.Fatal(err)
	}
	var m wireMsg
	for i, w := range want {
		if err := h.RecvMsg(&m); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if string(m.b) != w {
			t.Fatalf("message %d = %q, want %q", i, m.b, w)
		}
	}
	if err := h.RecvMsg(&m); !errors.Is(err, io.EOF) {
		t.Fatalf("after the trailers: %v, want io.EOF", err)
	}
	if err := h.Send(req); err == nil {
		t.Fatal("Send after the end succeeded")
	}
}

// TestH2TrailersOnly: an error answered with headers alone (END_STREAM,
// grpc-status) ends the stream with that status, its message decoded.
func TestH2TrailersOnly(t *testing.T) {
	addr := serveRawH2(t, nil, func(s *rawH2) {
		s.headers(true, ":status", "200", "content-type", "application/grpc",
			"grpc-status", "5", "grpc-message", "no%20such model%25")
	})
	h := dialTest(t, t.Context(), addr, 1<<20)
	wantStatus(t, h.RecvMsg(&wireMsg{}), codes.NotFound, "no such model%")
}

// TestH2HTTPStatus: a non-gRPC answer maps its HTTP status.
func TestH2HTTPStatus(t *testing.T) {
	addr := serveRawH2(t, nil, func(s *rawH2) {
		s.headers(true, ":status", "503", "content-type", "text/plain")
	})
	h := dialTest(t, t.Context(), addr, 1<<20)
	wantStatus(t, h.RecvMsg(&wireMsg{}), codes.Unavailable, "503")
}

// TestH2InterimHeaders: a 1xx response before the real one is skipped.
func TestH2InterimHeaders(t *testing.T) {
	addr := serveRawH2(t, nil, func(s *rawH2) {
		s.headers(false, ":status", "100")
		s.respond()
		s.data(grpcMsg([]byte("after 100")))
		s.trailers(codes.OK, "")
	})
	h := dialTest(t, t.Context(), addr, 1<<20)
	wantMessage(t, h, "after 100")
}

// TestH2BrokenConnection: a connection the server breaks is Unavailable,
// as with grpc-go, whatever broke it, and the error names the server's
// GOAWAY when it sent one: the target is then ejected.
func TestH2BrokenConnection(t *testing.T) {
	t.Run("bad header block", func(t *testing.T) {
		addr := serveRawH2(t, nil, func(s *rawH2) {
			s.check(s.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: h2StreamID, BlockFragment: []byte{0xff, 0xff, 0xff, 0xff}, EndHeaders: true}))
		})
		h := dialTest(t, t.Context(), addr, 1<<20)
		wantStatus(t, h.RecvMsg(&wireMsg{}), codes.Unavailable, "COMPRESSION_ERROR")
	})
	t.Run("too many pings", func(t *testing.T) {
		addr := serveRawH2(t, nil, func(s *rawH2) {
			s.respond()
			s.check(s.fr.WriteGoAway(h2StreamID, http2.ErrCodeEnhanceYourCalm, []byte("too_many_pings")))
			s.conn.(*net.TCPConn).CloseWrite()
		})
		h := dialTest(t, t.Context(), addr, 1<<20)
		wantStatus(t, h.RecvMsg(&wireMsg{}), codes.Unavailable, `GOAWAY ENHANCE_YOUR_CALM "too_many_pings"`)
	})
}

// TestH2OtherStreamData: DATA on a stream that is not ours (a broken
// server's) still counts against the connection's window, and is credited
// back: the server may send on.
func TestH2OtherStreamData(t *testing.T) {
	addr := serveRawH2(t, nil, func(s *rawH2) {
		s.respond()
		chunk := make([]byte, 16384)
		for range connWindow/2/len(chunk) + 1 {
			s.check(s.fr.WriteData(3, false, chunk))
		}
		s.conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		for {
			f, err := s.fr.ReadFrame()
			s.check(err)
			if w, ok := f.(*http2.WindowUpdateFrame); ok && w.StreamID == 0 {
				break
			}
		}
		s.conn.SetReadDeadline(time.Time{})
		s.data(grpcMsg([]byte("credited")))
		s.trailers(codes.OK, "")
	})
	h := dialTest(t, t.Context(), addr, 1<<20)
	wantMessage(t, h, "credited")
}

// TestH2TooManyPings: a target that closes a connection with GOAWAY
// "too_many_pings" has the keepalive time and ping gap of its new
// connections doubled (gRPC's rule).
func TestH2TooManyPings(t *testing.T) {
	addr := serveRawH2(t, nil, func(s *rawH2) {
		s.respond()
		s.check(s.fr.WriteGoAway(h2StreamID, http2.ErrCodeEnhanceYourCalm, []byte("too_many_pings")))
		// Closed for writing only: the client's frames, unread, would
		// turn a close into a reset that may discard the GOAWAY.
		s.conn.(*net.TCPConn).CloseWrite()
	})
	// The target's own options, dialled to the raw server: its grpc-go
	// connection (which New starts) must not take the server's one
	// connection.
	c := newTestClient(t, []string{"127.0.0.1:1"}, &Options{Transport: TransportH2, HealthInterval: -1, Cancel: CancelNone})
	tgt := c.targetList()[0]
	options := func() h2Options {
		tgt.mu.Lock()
		defer tgt.mu.Unlock()
		return *tgt.h2
	}
	o := options()
	o.addr = addr
	h, err := dialH2(t.Context(), o, func() bool { return true })
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	wantStatus(t, h.RecvMsg(&wireMsg{}), codes.Unavailable, "too_many_pings")
	if o2 := options(); o2.keepalive != 2*o.keepalive || o2.pingGap != 2*o.pingGap {
		t.Fatalf("keepalive %v, ping gap %v after too_many_pings; want %v, %v", o2.keepalive, o2.pingGap, 2*o.keepalive, 2*o.pingGap)
	}
}

// TestH2DialDeadline: a server that takes the connection and then says
// nothing, in TLS's handshake or instead of its HTTP/2 SETTINGS, or that
// sends invalid SETTINGS, fails the dial within its time.
func TestH2DialDeadline(t *testing.T) {
	silent := func(t *testing.T) string {
		return serveOnce(t, func(conn net.Conn) {
			io.Copy(io.Discard, conn) // until the client hangs up
		})
	}
	dial := func(o h2Options) error {
		o.maxRecv, o.maxSend, o.dialTime = 1<<20, 1<<20, 200*time.Millisecond
		h, err := dialH2(t.Context(), o, func() bool { return true })
		if err == nil {
			h.Close()
		}
		return err
	}
	t.Run("tls handshake", func(t *testing.T) {
		err := dial(h2Options{addr: silent(t), tls: &tls.Config{NextProtos: []string{"h2"}, ServerName: "x"}})
		wantStatus(t, err, codes.Unavailable, "")
	})
	t.Run("no settings", func(t *testing.T) {
		err := dial(h2Options{addr: silent(t), keepalive: 50 * time.Millisecond, kaTimeout: time.Second, pingGap: time.Second})
		wantStatus(t, err, codes.Unavailable, "no HTTP/2 SETTINGS")
	})
	t.Run("invalid settings", func(t *testing.T) {
		addr := serveRawH2(t, []http2.Setting{{ID: http2.SettingMaxFrameSize, Val: 0}}, func(*rawH2) {})
		wantStatus(t, dial(h2Options{addr: addr}), codes.Unavailable, "bad SETTINGS")
	})
}

// TestH2CloseSaysGoodbye: closing a stream the server still serves sends
// RST_STREAM CANCEL and GOAWAY NO_ERROR before the connection closes.
func TestH2CloseSaysGoodbye(t *testing.T) {
	got := make(chan []string, 1)
	addr := serveOnce(t, func(conn net.Conn) {
		s := &rawH2{t: t, conn: conn, fr: http2.NewFramer(conn, conn)}
		s.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
		preface := make([]byte, len(http2.ClientPreface))
		_, err := io.ReadFull(conn, preface)
		s.check(err)
		s.check(s.fr.WriteSettings())
		s.read() // the request's HEADERS
		s.respond()
		s.data(grpcMsg([]byte("one")))
		var frames []string
		for {
			f, err := s.fr.ReadFrame()
			if err != nil {
				break
			}
			switch f := f.(type) {
			case *http2.RSTStreamFrame:
				frames = append(frames, "RST_STREAM "+f.ErrCode.String())
			case *http2.GoAwayFrame:
				frames = append(frames, "GOAWAY "+f.ErrCode.String())
			}
		}
		got <- frames
	})
	h := dialTest(t, t.Context(), addr, 1<<20)
	wantMessage(t, h, "one")
	h.Close()
	if frames := <-got; !slices.Equal(frames, []string{"RST_STREAM CANCEL", "GOAWAY NO_ERROR"}) {
		t.Fatalf("the server saw %q before the connection closed, want RST_STREAM CANCEL and GOAWAY NO_ERROR", frames)
	}
}

// TestH2WindowOverflow: a WINDOW_UPDATE that takes a window past 2^31-1 is
// a connection error: the stream fails and the server gets GOAWAY
// FLOW_CONTROL_ERROR.
func TestH2WindowOverflow(t *testing.T) {
	for _, id := range []uint32{0, h2StreamID} {
		t.Run(fmt.Sprint("stream ", id), func(t *testing.T) {
			goaway := make(chan http2.ErrCode, 1)
			addr := serveRawH2(t, nil, func(s *rawH2) {
				s.respond()
				s.check(s.fr.WriteWindowUpdate(id, 1<<31-1))
				for {
					f, err := s.fr.ReadFrame()
					if err != nil {
						goaway <- 0
						return
					}
					if g, ok := f.(*http2.GoAwayFrame); ok {
						goaway <- g.ErrCode
						return
					}
				}
			})
			h := dialTest(t, t.Context(), addr, 1<<20)
			wantStatus(t, h.RecvMsg(&wireMsg{}), codes.Internal, "FLOW_CONTROL_ERROR")
			if code := <-goaway; code != http2.ErrCodeFlowControl {
				t.Fatalf("the server got GOAWAY %v, want FLOW_CONTROL_ERROR", code)
			}
		})
	}
}

// TestH2RSTStream: RST_STREAM ends the stream with grpc-go's code for it.
func TestH2RSTStream(t *testing.T) {
	for ec, code := range map[http2.ErrCode]codes.Code{
		http2.ErrCodeCancel:        codes.Canceled,
		http2.ErrCodeRefusedStream: codes.Unavailable,
		http2.ErrCodeInternal:      codes.Internal,
	} {
		t.Run(ec.String(), func(t *testing.T) {
			addr := serveRawH2(t, nil, func(s *rawH2) {
				s.respond()
				s.data(grpcMsg([]byte("one")))
				s.check(s.fr.WriteRSTStream(h2StreamID, ec))
			})
			h := dialTest(t, t.Context(), addr, 1<<20)
			wantMessage(t, h, "one")
			wantStatus(t, h.RecvMsg(&wireMsg{}), code, "RST_STREAM")
		})
	}
}

// TestH2GoAway: a GOAWAY that counts the stream lets it finish; one that
// does not fails it with Unavailable.
func TestH2GoAway(t *testing.T) {
	t.Run("graceful", func(t *testing.T) {
		addr := serveRawH2(t, nil, func(s *rawH2) {
			s.respond()
			s.check(s.fr.WriteGoAway(h2StreamID, http2.ErrCodeNo, nil))
			s.data(grpcMsg([]byte("after goaway")))
			s.trailers(codes.OK, "")
		})
		goingAway := make(chan struct{})
		h := dialTestOpts(t, t.Context(), h2Options{addr: addr, maxRecv: 1 << 20, goingAway: func() { close(goingAway) }})
		wantMessage(t, h, "after goaway")
		select {
		case <-goingAway: // the pool was told before the message came
		default:
			t.Fatal("goingAway was not called at the GOAWAY")
		}
		if err := h.RecvMsg(&wireMsg{}); !errors.Is(err, io.EOF) {
			t.Fatalf("end: %v, want io.EOF", err)
		}
	})
	t.Run("refused", func(t *testing.T) {
		addr := serveRawH2(t, nil, func(s *rawH2) {
			s.check(s.fr.WriteGoAway(0, http2.ErrCodeNo, nil))
		})
		h := dialTest(t, t.Context(), addr, 1<<20)
		wantStatus(t, h.RecvMsg(&wireMsg{}), codes.Unavailable, "GOAWAY")
	})
	t.Run("connection lost", func(t *testing.T) {
		addr := serveRawH2(t, nil, func(s *rawH2) {
			s.respond()
			s.conn.Close()
		})
		h := dialTest(t, t.Context(), addr, 1<<20)
		wantStatus(t, h.RecvMsg(&wireMsg{}), codes.Unavailable, "")
	})
}

// TestH2Oversized: a message above maxRecv fails the stream with
// ResourceExhausted before it is read.
func TestH2Oversized(t *testing.T) {
	addr := serveRawH2(t, nil, func(s *rawH2) {
		s.respond()
		s.data(grpcMsg([]byte("0123456789")))
		s.data(grpcMsg([]byte("0123456789a")))
	})
	h := dialTest(t, t.Context(), addr, 10)
	var m wireMsg
	if err := h.RecvMsg(&m); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, h.RecvMsg(&m), codes.ResourceExhausted, "larger than max (11 vs. 10)")
}

// TestH2SendFlowControl: the peer's SETTINGS give a small stream window;
// the sender never has more than the window outstanding, in DATA frames
// no larger than the peer's max frame size, waits for WINDOW_UPDATEs and
// completes the message.
func TestH2SendFlowControl(t *testing.T) {
	for _, window := range []uint32{1000, 1 << 20} {
		req := &pb.ModelInferRequest{ModelName: "m", Id: "big", RawInputContents: [][]byte{bytes.Repeat([]byte("x"), 40000)}}
		addr := serveRawH2(t, []http2.Setting{{ID: http2.SettingInitialWindowSize, Val: window}, {ID: http2.SettingMaxFrameSize, Val: 16384}}, func(s *rawH2) {
			var got []byte
			outstanding, updates := 0, 0
			for {
				f, ok := s.read().(*http2.DataFrame)
				if !ok {
					s.failf("want DATA")
				}
				if f.StreamEnded() {
					break
				}
				n := len(f.Data())
				got = append(got, f.Data()...)
				if n > 16384 {
					s.failf("DATA frame of %d bytes, max frame size 16384", n)
				}
				if outstanding += n; outstanding > int(window) {
					s.failf("%d bytes outstanding, window %d", outstanding, window)
				}
				if outstanding == int(window) {
					s.check(s.fr.WriteWindowUpdate(h2StreamID, uint32(outstanding)))
					s.check(s.fr.WriteWindowUpdate(0, uint32(outstanding)))
					outstanding = 0
					updates++
				}
			}
			want, _ := proto.Marshal(req)
			if !bytes.Equal(got, grpcMsg(want)) {
				s.failf("received %d bytes, not the request's %d", len(got), len(want)+5)
			}
			if window < 40000 && updates < 40 {
				s.failf("%d window updates, the sender did not wait", updates)
			}
			s.respond()
			s.trailers(codes.OK, "")
		})
		h := dialTest(t, t.Context(), addr, 1<<20)
		// The window applies once the client has read the SETTINGS (until
		// then it may send 64 KiB): the reader reads them.
		recv := make(chan error, 1)
		go func() { recv <- h.RecvMsg(&wireMsg{}) }()
		waitFor(t, "the peer's SETTINGS applied", func() bool {
			h.fmu.Lock()
			defer h.fmu.Unlock()
			return h.peerWindow == int64(window)
		})
		if err := h.Send(req); err != nil {
			t.Fatal(err)
		}
		if err := h.CloseSend(); err != nil {
			t.Fatal(err)
		}
		if err := <-recv; !errors.Is(err, io.EOF) {
			t.Fatalf("window %d: %v, want io.EOF", window, err)
		}
	}
}

// TestH2ContextEnds: the stream's context ending unblocks a RecvMsg
// waiting for a silent server, with Canceled.
func TestH2ContextEnds(t *testing.T) {
	addr := serveRawH2(t, nil, func(s *rawH2) {
		s.respond()
		s.data(grpcMsg([]byte("one")))
	})
	ctx, cancel := context.WithCancel(t.Context())
	h := dialTest(t, ctx, addr, 1<<20)
	if err := h.RecvMsg(&wireMsg{}); err != nil {
		t.Fatal(err)
	}
	recv := make(chan error, 1)
	go func() { recv <- h.RecvMsg(&wireMsg{}) }()
	cancel()
	wantStatus(t, <-recv, codes.Canceled, "")
}

// TestH2RecvAllocs: receiving a message allocates nothing in steady state.
func TestH2RecvAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector instruments allocations")
	}
	const n = 3000
	msg := grpcMsg(bytes.Repeat([]byte("t"), 100))
	addr := serveRawH2(t, nil, func(s *rawH2) {
		s.respond()
		for range n {
			if err := s.fr.WriteData(h2StreamID, false, msg); err != nil {
				return // the client is done
			}
		}
		s.trailers(codes.OK, "")
	})
	h := dialTest(t, t.Context(), addr, 1<<20)
	var m wireMsg
	recv := func() {
		if err := h.RecvMsg(&m); err != nil {
			t.Fatal(err)
		}
	}
	for range 100 {
		recv()
	}
	if a := testing.AllocsPerRun(2000, recv); a != 0 {
		t.Errorf("%v allocations per received message", a)
	}
}

// TestUnknownTransport: New refuses a transport it does not know.
func TestUnknownTransport(t *testing.T) {
	if _, err := New([]string{"127.0.0.1:1"}, &Options{Transport: "h3"}); err == nil || !strings.Contains(err.Error(), "h3") {
		t.Fatalf("err = %v, want unknown transport", err)
	}
}

// TestDialOptionsNeedGRPC: DialOptions with the h2 transport, named or
// by default, are refused, not honoured by switching transports.
func TestDialOptionsNeedGRPC(t *testing.T) {
	dial := []grpc.DialOption{grpc.WithUserAgent("x")}
	for _, tr := range []string{"", TransportH2} {
		if _, err := New([]string{"127.0.0.1:1"}, &Options{Transport: tr, DialOptions: dial}); err == nil || !strings.Contains(err.Error(), "DialOptions need transport grpc") {
			t.Errorf("transport %q: err = %v, want DialOptions refused", tr, err)
		}
	}
	c, err := New([]string{"127.0.0.1:1"}, &Options{Transport: TransportGRPC, DialOptions: dial})
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}
