package upstream

import (
	"math"
	"strconv"
	"testing"
)

// newTestCall builds a call without a target round trip.
func newTestCall(c *Client, mode CancelMode) *Call {
	cl := &Call{
		c:         c,
		req:       repeatN(0, 1, 0),
		decoupled: true,
		q:         newRespQueue(),
		done:      make(chan struct{}),
	}
	cl.id, cl.key = c.newID()
	cl.req.Id = cl.id
	cl.mode.Store(int32(mode))
	return cl
}

// TestSendQueue checks what the sender sends, without a server: requests
// in order, nothing for a call that ended before its request went out (not
// even its in-band cancel), the cancel after a request that did go out.
func TestSendQueue(t *testing.T) {
	c := newTestClient(t, []string{"127.0.0.1:1"}, &Options{HealthInterval: -1})
	tg := c.targetList()[0]
	s := tg.newStream(false)
	defer s.cancelCtx()
	a, b, d := newTestCall(c, CancelInband), newTestCall(c, CancelInband), newTestCall(c, CancelInband)
	for _, cl := range []*Call{a, b, d} {
		if !s.add(cl) {
			t.Fatal("add failed")
		}
	}
	if got := s.load.Load(); got != 3 || tg.outstanding.Load() != 3 {
		t.Fatalf("load %d, outstanding %d", got, tg.outstanding.Load())
	}
	if m, _ := s.next(); m != a.req {
		t.Fatalf("first message %v", m)
	}
	a.Cancel() // sent: its cancel must follow
	b.Cancel() // not sent yet: neither it nor its cancel goes out
	if m, _ := s.next(); m != d.req {
		t.Fatalf("second message %v, want d's request", m)
	}
	m, _ := s.next()
	if m.GetId() != a.id || !m.GetParameters()["streamgate_cancel"].GetBoolParam() || len(m.GetInputs()) != 0 ||
		m.GetModelName() != "repeat_int32" {
		t.Fatalf("third message %v, want a's in-band cancel", m)
	}
	if m, closeSend := s.next(); m != nil || closeSend {
		t.Fatalf("then %v, %v", m, closeSend)
	}
	if len(s.skipped) != 0 {
		t.Fatalf("skipped ids left: %v", s.skipped)
	}
	// An idle stream being closed half-closes once its calls are done.
	s.mu.Lock()
	s.opened = true
	s.mu.Unlock()
	s.drain()
	if _, closeSend := s.next(); closeSend {
		t.Fatal("half-closed with a call left")
	}
	d.Cancel()
	m, closeSend := s.next()
	if m.GetId() != d.id {
		t.Fatalf("got %v, want d's cancel", m)
	}
	if m, closeSend = s.next(); m != nil || !closeSend {
		t.Fatalf("then %v, %v; want the half-close", m, closeSend)
	}
	if s.add(newTestCall(c, CancelInband)) {
		t.Fatal("a closing stream took a call")
	}
	if st := c.Stats(); st.CancelsInband != 3 || st.InFlight != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestRoutingKey: the reader finds a call by the number in its id; only
// ids this client made map to a call's key, every other id to 0 (no
// call's), so a foreign or mangled id routes nowhere.
func TestRoutingKey(t *testing.T) {
	c := newTestClient(t, []string{"127.0.0.1:1"}, &Options{HealthInterval: -1})
	for range 3 {
		id, k := c.newID()
		if got := c.keyOf([]byte(id)); got != k || k == 0 {
			t.Fatalf("keyOf(%q) = %d, want %d", id, got, k)
		}
	}
	p := c.idPrefix
	for _, k := range []uint64{1, 35, 36, 1 << 40, math.MaxUint64} {
		id := p + strconv.FormatUint(k, 36)
		if got := c.keyOf([]byte(id)); got != k {
			t.Errorf("keyOf(%q) = %d, want %d", id, got, k)
		}
	}
	other := newTestClient(t, []string{"127.0.0.1:1"}, &Options{HealthInterval: -1})
	foreign, _ := other.newID()
	for _, id := range []string{
		"", "1", p, p + "0", p + "01", p + "A", p + "1-", p + "-1", "x" + p[1:] + "1",
		p + "3w5e11264sgsg", // 2^64, one past the largest key
		p + "zzzzzzzzzzzzz", p + "10000000000000", foreign,
	} {
		if got := c.keyOf([]byte(id)); got != 0 {
			t.Errorf("keyOf(%q) = %d, want 0 (not ours)", id, got)
		}
	}
}
