package bench

// The floor server's upstream: the pacer, which plays the engine.

import (
	"container/heap"
	"encoding/binary"
	"fmt"
	"net"
	"sync"
	"time"
)

// A pace record (pacer → floor server): the stream's number, the
// response's index, and 1 when it is the stream's last.
const paceRecord = 8

// A start record (floor server → pacer): the stream's number.
const startRecord = 4

// pacer is the floor server's upstream: it reads stream numbers and
// sends, for each, responses records delay apart.
type pacer struct {
	ln        net.Listener
	responses int
	delay     time.Duration
	tick      time.Duration // 0: each response when due
	epoch     time.Time
	wg        sync.WaitGroup
	done      chan struct{}
	wake      chan struct{} // tick 0: a start came while nothing was due

	mu   sync.Mutex // guards due and conn
	due  dueHeap
	conn net.Conn
}

// dueItem is a stream's next response: due at (since the pacer's epoch).
type dueItem struct {
	at  time.Duration
	id  uint32
	seq uint16
}

type dueHeap []dueItem

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h dueHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *dueHeap) Push(x any)        { *h = append(*h, x.(dueItem)) }
func (h *dueHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// startPacer listens on a loopback port for the floor server, which it
// then paces until close.
func startPacer(responses int, delay, tick time.Duration) (*pacer, error) {
	if responses > 1<<16 {
		return nil, fmt.Errorf("--floor: at most %d responses per request", 1<<16)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &pacer{ln: ln, responses: responses, delay: delay, tick: tick, epoch: time.Now(),
		done: make(chan struct{}), wake: make(chan struct{}, 1)}
	p.wg.Go(p.serve)
	return p, nil
}

func (p *pacer) addr() string { return p.ln.Addr().String() }

// serve takes the floor server's connection, reads its starts on another
// goroutine and sends what is due every tick.
func (p *pacer) serve() {
	c, err := p.ln.Accept()
	if err != nil {
		return
	}
	p.mu.Lock()
	p.conn = c
	p.mu.Unlock()
	select {
	case <-p.done: // close ran before the connection was kept
		c.Close()
		return
	default:
	}
	p.wg.Go(func() { p.readStarts(c) })
	t := time.NewTimer(p.tick)
	defer t.Stop()
	var out []byte
	for {
		select {
		case <-t.C:
		case <-p.wake:
		case <-p.done:
			return
		}
		var next time.Duration
		out, next = p.collect(out[:0])
		if len(out) > 0 {
			if _, err := c.Write(out); err != nil {
				return
			}
		}
		if p.tick > 0 {
			next = p.tick
		}
		t.Reset(next)
	}
}

// collect appends the records due now to out, and says how long until
// the next is due (an hour when none is).
func (p *pacer) collect(out []byte) ([]byte, time.Duration) {
	now := time.Since(p.epoch)
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.due) > 0 && p.due[0].at <= now {
		it := heap.Pop(&p.due).(dueItem)
		last := uint16(0)
		if int(it.seq) == p.responses-1 {
			last = 1
		}
		out = binary.LittleEndian.AppendUint32(out, it.id)
		out = binary.LittleEndian.AppendUint16(out, it.seq)
		out = binary.LittleEndian.AppendUint16(out, last)
		if last == 0 {
			heap.Push(&p.due, dueItem{at: it.at + p.delay, id: it.id, seq: it.seq + 1})
		}
	}
	if len(p.due) == 0 {
		return out, time.Hour
	}
	return out, p.due[0].at - now
}

// readStarts schedules the first response of every stream number c
// sends, delay after it arrives.
func (p *pacer) readStarts(c net.Conn) {
	buf := make([]byte, 4096)
	have := 0
	for {
		n, err := c.Read(buf[have:])
		if err != nil {
			return
		}
		have += n
		at := time.Since(p.epoch) + p.delay
		p.mu.Lock()
		idle := len(p.due) == 0 // else the pacer waits for one due sooner
		i := 0
		for ; have-i >= startRecord; i += startRecord {
			heap.Push(&p.due, dueItem{at: at, id: binary.LittleEndian.Uint32(buf[i:])})
		}
		p.mu.Unlock()
		if idle && p.tick == 0 {
			select {
			case p.wake <- struct{}{}:
			default:
			}
		}
		have = copy(buf, buf[i:have])
	}
}

// close stops pacing and waits for the pacer's goroutines.
func (p *pacer) close() {
	close(p.done)
	p.ln.Close()
	p.mu.Lock()
	if p.conn != nil {
		p.conn.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
