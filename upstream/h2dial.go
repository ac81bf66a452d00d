package upstream

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/streamgate/streamgate/upstream/rawsock"
)

// h2TLS is cfg, as namedTLS returned it, ready for dialH2 to a target
// whose :authority is authority: the server name grpc-go would check
// (cfg's, else the authority's host), and ALPN "h2". Nil for plaintext.
func h2TLS(cfg *tls.Config, authority string) *tls.Config {
	if cfg == nil {
		return nil
	}
	cfg = cfg.Clone()
	if cfg.ServerName == "" {
		cfg.ServerName = serverName(authority)
	}
	if !slices.Contains(cfg.NextProtos, "h2") {
		cfg.NextProtos = append(cfg.NextProtos, "h2")
	}
	return cfg
}

// dialH2 connects to o.addr and opens ModelStreamInfer on a connection of
// its own, sending the outgoing gRPC metadata of ctx. The connection, its
// TLS handshake and the server's SETTINGS must all come within
// o.dialTime. The stream lives until ctx ends, an error ends it, or
// Close. busy (for keepalive) says whether the stream carries calls.
func dialH2(ctx context.Context, o h2Options, busy func() bool) (*h2Stream, error) {
	deadline := time.Now().Add(o.dialTime)
	dctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	a, err := parseAddress(o.addr)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "target %q: %v", o.addr, err)
	}
	var d net.Dialer
	conn, err := d.DialContext(dctx, a.network, a.addr)
	if err != nil {
		return nil, h2DialError(ctx, err)
	}
	conn = rawsock.Wrap(conn)
	scheme := "http"
	if o.tls != nil {
		tc := tls.Client(conn, o.tls)
		if err := tc.HandshakeContext(dctx); err != nil {
			conn.Close()
			return nil, h2DialError(ctx, err)
		}
		if p := tc.ConnectionState().NegotiatedProtocol; p != "h2" {
			conn.Close()
			return nil, status.Errorf(codes.Unavailable, "connection error: %s negotiated ALPN %q, want \"h2\"", o.addr, p)
		}
		conn, scheme = tc, "https"
	}
	h := &h2Stream{
		conn:       conn,
		bw:         bufio.NewWriterSize(conn, 32<<10),
		maxRecv:    o.maxRecv,
		maxSend:    o.maxSend,
		sendStream: 65535, // the protocol's initial windows, until SETTINGS
		sendConn:   65535,
		peerWindow: 65535,
		peerFrame:  16384,
		onPings:    o.tooManyPings,
		onGoAway:   o.goingAway,
	}
	h.cond = sync.NewCond(&h.fmu)
	var r io.Reader = conn
	var ka *kaReader
	h.writeTimeout = h2WriteTimeout
	if o.keepalive > 0 {
		h.writeTimeout = o.keepalive + o.kaTimeout
		ka = &kaReader{h: h, time: o.keepalive, timeout: o.kaTimeout, gap: o.pingGap, busy: busy}
		r = ka
	}
	h.fr = http2.NewFramer(h.bw, bufio.NewReaderSize(readNotifier{r, h}, 32<<10))
	h.fr.SetReuseFrames()
	h.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	h.stop = context.AfterFunc(ctx, func() { h.fail(status.FromContextError(ctx.Err()).Err()) })
	err = h.open(ctx, scheme, cmp.Or(o.authority, a.authority))
	if err == nil {
		err = h.serverPreface(deadline)
	}
	if err != nil {
		h.stop()
		return nil, h.fail(err)
	}
	if ka != nil {
		ka.armed = true
		conn.SetReadDeadline(time.Now().Add(o.keepalive))
	} else {
		conn.SetReadDeadline(time.Time{})
	}
	return h, nil
}

// serverPreface reads the server's connection preface, a SETTINGS frame,
// by deadline: a server that takes the connection and says nothing fails
// the dial, rather than every request later put on the stream.
func (h *h2Stream) serverPreface(deadline time.Time) error {
	h.conn.SetReadDeadline(deadline)
	f, err := h.fr.ReadFrame()
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return status.Error(codes.Unavailable, "connection error: the server sent no HTTP/2 SETTINGS within the connect timeout")
	}
	if err != nil {
		return h.readError(err)
	}
	if sf, ok := f.(*http2.SettingsFrame); ok && !sf.IsAck() {
		return h.settings(sf)
	}
	return status.Errorf(codes.Unavailable, "connection error: the server's first frame is %v, not SETTINGS", f.Header().Type)
}

func h2DialError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return status.FromContextError(ctx.Err()).Err()
	}
	return status.Errorf(codes.Unavailable, "connection error: %v", err)
}

// open writes the client preface, our SETTINGS and connection window, and
// the request's HEADERS.
func (h *h2Stream) open(ctx context.Context, scheme, authority string) error {
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	field := func(k, v string) { enc.WriteField(hpack.HeaderField{Name: k, Value: v}) }
	field(":method", "POST")
	field(":scheme", scheme)
	field(":path", modelStreamInferPath)
	field(":authority", authority)
	field("content-type", "application/grpc")
	field("te", "trailers")
	field("user-agent", "streamgate-h2")
	md, _ := metadata.FromOutgoingContext(ctx)
	for k, vs := range md {
		if strings.HasPrefix(k, ":") || isReservedHeader(k) {
			continue
		}
		for _, v := range vs {
			if strings.HasSuffix(k, "-bin") {
				v = base64.RawStdEncoding.EncodeToString([]byte(v))
			}
			field(k, v)
		}
	}
	h.lockWrite()
	defer h.wmu.Unlock()
	if _, err := h.bw.WriteString(http2.ClientPreface); err != nil {
		return h.writeError(err)
	}
	err := h.fr.WriteSettings(
		http2.Setting{ID: http2.SettingEnablePush, Val: 0},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: streamWindow},
	)
	if err == nil {
		err = h.fr.WriteWindowUpdate(0, connWindow-65535)
	}
	if err == nil {
		err = h.writeHeaderBlock(hb.Bytes())
	}
	if err == nil {
		err = h.bw.Flush()
	}
	if err != nil {
		return h.writeError(err)
	}
	return nil
}

// writeHeaderBlock writes the request's HEADERS, with CONTINUATION frames
// when the block exceeds the peer's frame size (16 KiB until SETTINGS).
func (h *h2Stream) writeHeaderBlock(b []byte) error {
	const max = 16384
	first := b[:min(len(b), max)]
	b = b[len(first):]
	err := h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: h2StreamID, BlockFragment: first, EndHeaders: len(b) == 0})
	for err == nil && len(b) > 0 {
		n := min(len(b), max)
		err = h.fr.WriteContinuation(h2StreamID, n == len(b), b[:n])
		b = b[n:]
	}
	return err
}

// isReservedHeader reports the headers gRPC metadata may not set.
func isReservedHeader(k string) bool {
	switch k {
	case "content-type", "user-agent", "te", "grpc-message-type", "grpc-encoding",
		"grpc-message", "grpc-status", "grpc-timeout", "grpc-status-details-bin":
		return true
	}
	return false
}
