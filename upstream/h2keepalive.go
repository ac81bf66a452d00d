package upstream

import (
	"errors"
	"os"
	"time"
)

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
