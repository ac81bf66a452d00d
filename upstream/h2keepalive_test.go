package upstream

// The own HTTP/2 transport's pings and keepalives.

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	pb "github.com/streamgate/streamgate/proto/inferencepb"
	"golang.org/x/net/http2"
	"google.golang.org/grpc/codes"
)

// TestH2Ping: a PING is answered with its data.
func TestH2Ping(t *testing.T) {
	addr := serveRawH2(t, nil, func(s *rawH2) {
		s.respond()
		data := [8]byte{'a', 'b', 'c', 'd', 'e', 'f', 'g', 'h'}
		s.check(s.fr.WritePing(false, data))
		f, ok := s.read().(*http2.PingFrame)
		if !ok || !f.IsAck() || f.Data != data {
			s.failf("got %v, want the PING's ACK", f)
		}
		s.data(grpcMsg([]byte("pong seen")))
		s.trailers(codes.OK, "")
	})
	h := dialTest(t, t.Context(), addr, 1<<20)
	wantMessage(t, h, "pong seen")
}

// TestH2KeepalivePingPolicy: on a busy stream whose server stays silent,
// the client pings once, then only after the ping gap while the server
// sends no DATA or HEADERS: a server enforcing grpc core's ping policy
// (here strictly: no second ping within 2 s without data between) never
// sees a strike. Pinging every keepalive period and ping timeout (50 ms
// and 1 s) would.
func TestH2KeepalivePingPolicy(t *testing.T) {
	const minGap = 2 * time.Second
	addr := serveRawH2(t, nil, func(s *rawH2) {
		s.respond()
		var last time.Time
		for pings := 0; pings < 2; {
			f, ok := s.read().(*http2.PingFrame)
			if !ok {
				s.failf("got %v, want a PING", f)
			}
			now := time.Now()
			if !last.IsZero() && now.Sub(last) < minGap {
				s.check(s.fr.WriteGoAway(h2StreamID, http2.ErrCodeEnhanceYourCalm, []byte("too_many_pings")))
				s.conn.Close()
				s.failf("ping %d came %v after the last, with no data between", pings+1, now.Sub(last))
			}
			last = now
			pings++
			s.check(s.fr.WritePing(true, f.Data))
		}
		s.data(grpcMsg([]byte("after two pings")))
		s.trailers(codes.OK, "")
	})
	h := dialTestOpts(t, t.Context(), h2Options{addr: addr, maxRecv: 1 << 20,
		keepalive: 50 * time.Millisecond, kaTimeout: time.Second, pingGap: 3 * time.Second})
	wantMessage(t, h, "after two pings")
}

// TestH2KeepaliveStuckSender: the peer stops reading while the sender is
// in the middle of a large message, blocked in its TCP write and holding
// the write lock, so that the reader cannot write its keepalive ping
// either: the write's deadline (keepalive plus its timeout) fails the
// stream, rather than leaving both stuck for good.
func TestH2KeepaliveStuckSender(t *testing.T) {
	stop := make(chan struct{})
	addr := serveRawH2(t, []http2.Setting{{ID: http2.SettingInitialWindowSize, Val: 1<<31 - 1}}, func(s *rawH2) {
		s.check(s.fr.WriteWindowUpdate(0, 1<<31-1-65535))
		s.respond()
		<-stop // read nothing more
	})
	t.Cleanup(func() { close(stop) })
	h := dialTestOpts(t, t.Context(), h2Options{addr: addr, maxRecv: 1 << 20,
		keepalive: 50 * time.Millisecond, kaTimeout: 200 * time.Millisecond, pingGap: time.Second})
	recv := make(chan error, 1)
	go func() { recv <- h.RecvMsg(&wireMsg{}) }()
	waitFor(t, "the peer's window", func() bool {
		h.fmu.Lock()
		defer h.fmu.Unlock()
		return h.sendConn > 1<<30
	})
	// Far more than the socket buffers hold.
	big := &pb.ModelInferRequest{ModelName: "m", RawInputContents: [][]byte{make([]byte, 2*socketBuffers(t))}}
	sent := make(chan error, 1)
	go func() { sent <- h.Send(big) }()
	wantStatus(t, <-recv, codes.Unavailable, "")
	wantStatus(t, <-sent, codes.Unavailable, "")
}

// socketBuffers is the most a TCP connection's two socket buffers may
// hold between a writer and a reader that reads nothing (at least 32 MiB).
func socketBuffers(t *testing.T) int {
	n := 0
	for _, f := range []string{"/proc/sys/net/ipv4/tcp_wmem", "/proc/sys/net/ipv4/tcp_rmem"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if v := strings.Fields(string(b)); len(v) == 3 {
			m, _ := strconv.Atoi(v[2])
			n += m
		}
	}
	return max(n, 32<<20)
}
