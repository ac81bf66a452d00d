package upstream

import (
	"strconv"
	"testing"
)

// newTestCall builds a call without a target round trip.
func newTestCall(c *Client, mode CancelMode) *Call {
	cl := &Call{
		c:         c,
		req:       repeatN(0, 1, 0),
		id:        c.idPrefix + "t" + strconv.FormatUint(c.seq.Add(1), 10),
		decoupled: true,
		q:         newRespQueue(),
		done:      make(chan struct{}),
	}
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
