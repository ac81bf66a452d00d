package bench

import (
	"bytes"
	"context"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/streamgate/streamgate/upstream/rawsock"
)

// The floor (--floor): what relaying a paced stream costs a process that
// does nothing but the relay's unavoidable work, measured on the same
// box, with the same clients and load as the gateway's run beside it.
//
// The floor server is a second process (this binary, `streamgate bench
// --floor-serve PACER`), so that its CPU, system calls and context
// switches are counted as a spawned gateway's are. It speaks just enough
// of the gateway's client protocols for the bench's clients: an HTTP/1.1
// keep-alive POST of generate_stream answered with the gateway's event
// stream (chunked, one event per response, the last event and the end in
// one write), and /v1/ws (the handshake, then generate frames answered
// with data frames and a done frame, the last data frame and the done
// frame in one write). It does not parse JSON: it finds a request's end
// (Content-Length) and a frame's "id", and builds the repeat_int32 events
// from the stream's number and the response's index.
//
// Its pace comes from one upstream socket it reads, as the gateway's
// does: per request it writes the stream's number to the pacer (the
// bench, playing the engine), and the pacer sends, every --floor-tick
// (1 ms by default), one record per response due (every --delay,
// --responses per stream), in one write. One read of the floor server
// then carries every response due in that tick (about 20 at 20,000
// responses/s); with --floor-tick 0 the pacer sends each response when it
// is due, so a read shares only what fell due at once. Each response is one
// non-blocking write (rawsock.Writer) to its client, from the goroutine
// that read it (a WebSocket carrying many requests gets those one read
// brought in one write, as the gateway batches them). What is left per
// response is the floor: one client write plus a share of an upstream
// read (and, per request, the request's read and its upstream write).

// floorServing is the log line the floor server writes once it serves.
var floorServing = servingLine{"floor serving", []string{"http"}}

// spawnFloor starts the floor server (exe, this binary by default) paced
// by a new pacer, and waits until it serves.
func spawnFloor(ctx context.Context, exe string, wl workload, tick time.Duration) (*spawned, *pacer, error) {
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return nil, nil, err
		}
	}
	p, err := startPacer(wl.Responses, wl.Delay, tick)
	if err != nil {
		return nil, nil, err
	}
	proc, err := startProc(exe, []string{"bench", "--floor-serve", p.addr()}, floorServing)
	if err != nil {
		p.close()
		return nil, nil, err
	}
	s := &spawned{procs: []*serverProc{proc}}
	addrs, err := proc.await(ctx, 1)
	if err != nil {
		s.stop()
		p.close()
		return nil, nil, err
	}
	s.http = addrs[0]
	return s, p, nil
}

// floorModel is the model the floor server's events name: the floor
// serves repeat_int32's responses only.
const floorModel = modelRepeat

// serveFloor runs the floor server: it dials the pacer at pacerAddr,
// serves on a free loopback port (said on stderr as "floor serving"),
// and returns when the pacer hangs up or ctx ends.
func serveFloor(ctx context.Context, pacerAddr string, stderr io.Writer) error {
	up, err := net.Dial("tcp", pacerAddr)
	if err != nil {
		return fmt.Errorf("floor: the pacer: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		up.Close()
		return err
	}
	f := &floor{up: rawsock.Wrap(up), streams: map[uint32]*floorStream{}}
	line, _ := json.Marshal(map[string]string{"time": time.Now().UTC().Format(time.RFC3339Nano), "msg": floorServing.msg, "http": ln.Addr().String()})
	fmt.Fprintf(stderr, "%s\n", line)
	stop := context.AfterFunc(ctx, func() { up.Close(); ln.Close() })
	defer stop()
	go f.accept(ln) // ends when ln closes, below
	err = f.relay()
	ln.Close()
	if ctx.Err() != nil || errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// floor is the floor server's state: its upstream and the streams in
// flight by number.
type floor struct {
	up   net.Conn // the pacer
	upMu sync.Mutex
	next atomic.Uint32

	mu      sync.Mutex
	streams map[uint32]*floorStream
}

// floorStream is one request in flight.
type floorStream struct {
	c      *floorConn
	ws     bool
	id     string // the WebSocket request's id
	out    uint32 // its OUT value
	opened bool   // its first response (and, SSE, the headers) is out
}

// floorConn is a client connection. Writes go out with one
// non-blocking write each; what the socket does not take waits in
// pending for a goroutine that writes it as the socket drains, and later
// writes queue behind it.
type floorConn struct {
	conn net.Conn // rawsock.Conn
	w    *rawsock.Writer
	out  []byte // what the read being relayed has for it (relay's)

	mu       sync.Mutex
	pending  []byte
	draining bool
	dead     atomic.Bool
	// cancelled holds the WebSocket ids the client cancelled.
	cancelled map[string]bool
}

func (c *floorConn) send(b []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.draining {
		c.pending = append(c.pending, b...)
		return
	}
	n, err := c.w.Write(b)
	if err != nil {
		c.fail()
		return
	}
	if n < len(b) {
		c.pending = append(c.pending[:0], b[n:]...)
		c.draining = true
		go c.drain()
	}
}

// drain writes pending, waiting for the socket, until it is empty.
func (c *floorConn) drain() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.pending) > 0 {
		p := c.pending
		c.pending = nil
		c.mu.Unlock()
		_, err := c.conn.Write(p)
		c.mu.Lock()
		if err != nil {
			c.fail()
			break
		}
	}
	c.draining = false
}

func (c *floorConn) fail() {
	c.dead.Store(true)
	c.conn.Close()
}

func (f *floor) accept(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		fc := &floorConn{conn: rawsock.Wrap(c), w: rawsock.NewWriter(c)}
		if fc.w == nil {
			c.Close()
			continue
		}
		go f.serveConn(fc)
	}
}

// start registers a request of c and asks the pacer for its responses.
func (f *floor) start(s *floorStream) error {
	n := f.next.Add(1)
	s.out = n
	f.mu.Lock()
	f.streams[n] = s
	f.mu.Unlock()
	var rec [startRecord]byte
	binary.LittleEndian.PutUint32(rec[:], n)
	f.upMu.Lock()
	_, err := f.up.Write(rec[:])
	f.upMu.Unlock()
	return err
}

// relay reads the pacer's records and writes each response to its
// client: the floor's whole per-response work.
// The responses of one read go out in one write per connection: one per
// response for an event stream, and for a WebSocket carrying many
// requests, those of its requests that one read brought.
func (f *floor) relay() error {
	buf := make([]byte, 64<<10)
	var touched []*floorConn // connections with responses of this read
	have := 0
	for {
		n, err := f.up.Read(buf[have:])
		if err != nil {
			return err
		}
		have += n
		i := 0
		f.mu.Lock()
		for ; have-i >= paceRecord; i += paceRecord {
			id := binary.LittleEndian.Uint32(buf[i:])
			seq := binary.LittleEndian.Uint16(buf[i+4:])
			last := binary.LittleEndian.Uint16(buf[i+6:]) == 1
			s := f.streams[id]
			if s == nil {
				continue
			}
			c := s.c
			if last || c.dead.Load() {
				delete(f.streams, id)
			}
			if c.dead.Load() {
				continue
			}
			if len(c.out) == 0 {
				touched = append(touched, c)
			}
			if s.ws {
				c.out = s.appendFrames(c.out, seq, last)
			} else {
				c.out = s.appendEvent(c.out, seq, last)
			}
		}
		f.mu.Unlock()
		for k, c := range touched {
			c.send(c.out)
			c.out = c.out[:0]
			touched[k] = nil
		}
		touched = touched[:0]
		have = copy(buf, buf[i:have])
	}
}

// The gateway's event stream headers (Date aside).
const sseHeaders = "HTTP/1.1 200 OK\r\nCache-Control: no-cache\r\nContent-Type: text/event-stream; charset=utf-8\r\nTransfer-Encoding: chunked\r\nX-Accel-Buffering: no\r\n\r\n"

// appendData appends a repeat_int32 response, as the gateway writes it.
func (s *floorStream) appendData(b []byte, seq uint16) []byte {
	b = append(b, `{"model_name":"`+floorModel+`","model_version":"1","OUT":`...)
	b = strconv.AppendUint(b, uint64(s.out), 10)
	b = append(b, `,"IDX":`...)
	b = strconv.AppendUint(b, uint64(seq), 10)
	return append(b, '}')
}

// appendEvent appends response seq of an event stream: one chunk (after
// the headers, for the first) and, for the last, the end.
func (s *floorStream) appendEvent(b []byte, seq uint16, last bool) []byte {
	if !s.opened {
		b = append(b, sseHeaders...)
		s.opened = true
	}
	var ev [256]byte
	e := append(ev[:0], "id: "...)
	e = strconv.AppendUint(e, uint64(seq)+1, 10)
	e = append(e, "\ndata: "...)
	e = s.appendData(e, seq)
	e = append(e, "\n\n"...)
	b = strconv.AppendInt(b, int64(len(e)), 16)
	b = append(b, "\r\n"...)
	b = append(b, e...)
	b = append(b, "\r\n"...)
	if last {
		b = append(b, "0\r\n\r\n"...)
	}
	return b
}

// appendFrames appends response seq of a WebSocket request: its data
// frame and, for the last or a cancelled request, its done frame.
func (s *floorStream) appendFrames(b []byte, seq uint16, last bool) []byte {
	s.c.mu.Lock()
	cancelled := s.c.cancelled[s.id]
	if cancelled {
		delete(s.c.cancelled, s.id)
	}
	s.c.mu.Unlock()
	var fr [256]byte
	if !cancelled {
		e := append(fr[:0], `{"type":"data","id":"`...)
		e = append(e, s.id...)
		e = append(e, `","seq":`...)
		e = strconv.AppendUint(e, uint64(seq), 10)
		e = append(e, `,"data":`...)
		e = s.appendData(e, seq)
		e = append(e, '}')
		b = appendServerFrame(b, e)
	}
	if last || cancelled {
		reason := "final"
		if cancelled {
			reason = "cancelled"
		}
		b = appendServerFrame(b, []byte(`{"type":"done","id":"`+s.id+`","reason":"`+reason+`"}`))
	}
	return b
}

// appendServerFrame appends a text frame (unmasked, as a server sends).
func appendServerFrame(b, payload []byte) []byte {
	b = append(b, 0x81)
	switch n := len(payload); {
	case n < 126:
		b = append(b, byte(n))
	case n < 1<<16:
		b = append(b, 126)
		b = binary.BigEndian.AppendUint16(b, uint16(n))
	default:
		b = append(b, 127)
		b = binary.BigEndian.AppendUint64(b, uint64(n))
	}
	return append(b, payload...)
}

// serveConn reads c's requests: event-stream POSTs, one at a time (the
// next comes once the stream has ended), or a WebSocket's frames.
func (f *floor) serveConn(c *floorConn) {
	defer c.fail()
	r := &floorReader{c: c.conn, buf: make([]byte, 0, 4096)}
	for {
		head, err := r.head()
		if err != nil {
			return
		}
		if key := header(head, "Sec-WebSocket-Key"); key != "" {
			f.serveWS(c, r, key)
			return
		}
		n, err := strconv.Atoi(header(head, "Content-Length"))
		if err != nil || !bytes.HasPrefix(head, []byte("POST ")) {
			c.send([]byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"))
			return
		}
		if err := r.skip(n); err != nil {
			return
		}
		if f.start(&floorStream{c: c}) != nil {
			return
		}
	}
}

// serveWS answers the WebSocket handshake and reads the client's frames:
// a generate frame starts a request, a cancel frame ends it at its next
// response, a close frame closes the socket.
func (f *floor) serveWS(c *floorConn, r *floorReader, key string) {
	sum := sha1.Sum([]byte(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	c.send([]byte("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " +
		base64.StdEncoding.EncodeToString(sum[:]) + "\r\nSec-WebSocket-Protocol: " + wsSubprotocol + "\r\n\r\n"))
	c.cancelled = map[string]bool{}
	for {
		op, p, err := r.frame()
		if err != nil || op == 8 {
			return
		}
		if op != 1 {
			continue // pings and binary frames: the bench sends none
		}
		id := frameID(p)
		switch {
		case id == "":
		case bytes.Contains(p, []byte(`"type":"cancel"`)):
			c.mu.Lock()
			c.cancelled[id] = true
			c.mu.Unlock()
		default:
			if f.start(&floorStream{c: c, ws: true, id: id}) != nil {
				return
			}
		}
	}
}

// frameID is the "id" of a client frame, found without parsing it.
func frameID(p []byte) string {
	_, rest, ok := bytes.Cut(p, []byte(`"id":"`))
	if !ok {
		return ""
	}
	id, _, ok := bytes.Cut(rest, []byte(`"`))
	if !ok {
		return ""
	}
	return string(id)
}

// header returns the value of header name in an HTTP head, "" when it
// has none.
func header(head []byte, name string) string {
	for line := range bytes.SplitSeq(head, []byte("\r\n")) {
		k, v, ok := bytes.Cut(line, []byte(":"))
		if ok && bytes.EqualFold(bytes.TrimSpace(k), []byte(name)) {
			return string(bytes.TrimSpace(v))
		}
	}
	return ""
}

// floorReader reads a client connection's requests and frames.
type floorReader struct {
	c   net.Conn
	buf []byte // read and not consumed
}

// fill reads more into buf.
func (r *floorReader) fill() error {
	if len(r.buf) == cap(r.buf) {
		if cap(r.buf) >= 1<<20 {
			return errors.New("floor: request too large")
		}
		r.buf = append(r.buf, make([]byte, cap(r.buf))...)[:len(r.buf)]
	}
	n, err := r.c.Read(r.buf[len(r.buf):cap(r.buf)])
	r.buf = r.buf[:len(r.buf)+n]
	return err
}

// consume drops the first n bytes of buf.
func (r *floorReader) consume(n int) {
	r.buf = r.buf[:copy(r.buf, r.buf[n:])]
}

// head returns the next request's head (request line and headers),
// consumed; it is valid until the next read.
func (r *floorReader) head() ([]byte, error) {
	for {
		if i := bytes.Index(r.buf, []byte("\r\n\r\n")); i >= 0 {
			h := bytes.Clone(r.buf[:i])
			r.consume(i + 4)
			return h, nil
		}
		if err := r.fill(); err != nil {
			return nil, err
		}
	}
}

// skip consumes n bytes (a request's body).
func (r *floorReader) skip(n int) error {
	for n > 0 {
		if len(r.buf) == 0 {
			if err := r.fill(); err != nil {
				return err
			}
		}
		k := min(n, len(r.buf))
		r.consume(k)
		n -= k
	}
	return nil
}

// frame returns the next client frame's opcode and unmasked payload,
// valid until the next read.
func (r *floorReader) frame() (op byte, payload []byte, err error) {
	for {
		if op, p, n, ok := parseClientFrame(r.buf); ok {
			payload = bytes.Clone(p)
			r.consume(n)
			return op, payload, nil
		}
		if err := r.fill(); err != nil {
			return 0, nil, err
		}
	}
}

// parseClientFrame parses one masked frame at the start of b: its
// opcode, its payload (unmasked in place) and its length in b; ok is
// false while b holds less than the whole frame.
func parseClientFrame(b []byte) (op byte, payload []byte, n int, ok bool) {
	if len(b) < 2 {
		return 0, nil, 0, false
	}
	op = b[0] & 0x0f
	size, h := int(b[1]&0x7f), 2
	switch size {
	case 126:
		if len(b) < 4 {
			return 0, nil, 0, false
		}
		size, h = int(binary.BigEndian.Uint16(b[2:])), 4
	case 127:
		if len(b) < 10 {
			return 0, nil, 0, false
		}
		size, h = int(binary.BigEndian.Uint64(b[2:])), 10
	}
	masked := b[1]&0x80 != 0
	if masked {
		h += 4
	}
	if size < 0 || len(b) < h+size {
		return 0, nil, 0, false
	}
	payload = b[h : h+size]
	if masked {
		mask := b[h-4 : h]
		for i := range payload {
			payload[i] ^= mask[i&3]
		}
	}
	return op, payload, h + size, true
}
